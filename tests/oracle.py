"""An independent oracle for token-exactness: seeded random agent runs and what each trained turn must look like.

Nothing here uses msgtrain's linearizer, renderer or encoder. A run is replayed as the calls an agent made
(context, tools, sampled choices, the call's time, optional engine ids); the expected prompt ids come from
``apply_chat_template`` (or the logged ids), the expected completion ids from the template's rendering of the turn
after its generation prompt up to the template's end-of-turn token (a per-template table that this file owns), or
the logged ids.

Control-token text in a log string that the policy did not write (user, system and tool content, tool-call
argument keys and values, tool schemas) is content: the oracle renders the conversation with each such string's
added-token text replaced by a placeholder, so every added token in that rendering is the template's own; it
encodes the rendering as the tokenizer does, then re-encodes each stretch between two template tokens that held a
placeholder as the plain text it stands for (no added token recognised; whitespace a neighbouring template token
strips stripped; a word-start prefix only at the very start of the input). What an assistant wrote in its content
is rendered as is (templates parse inline ``<think>``). The clock templates read is pinned to the call's time.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import datetime as dt
import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.template_families import FAMILIES

# How each template ends an assistant turn: (tokens, "first" | "last" occurrence in the rendered completion).
END_OF_TURN = {
    "demo": (["<|im_end|>"], "first"),
    "qwen3": (["<|im_end|>"], "first"),
    "qwen2.5": (["<|im_end|>"], "first"),
    "phi3": (["<|end|>"], "first"),
    "gpt-oss": (["<|end|>", "<|return|>", "<|call|>"], "last"),
    "smollm3": (["<|im_end|>"], "first"),
    "deepseek-r1-distill": (["<｜end▁of▁sentence｜>"], "first"),
    "rerender-tooluse": (["<|END_OF_TURN_TOKEN|>"], "first"),
    "calls-only": (["<|im_end|>"], "first"),
    "role-headers": (["<|user|>", "<|observation|>", "<|endoftext|>"], "first"),
    "drops-calls": (["<|end_of_text|>"], "first"),
    "prefill-turns": (["<turn|>", "<|tool_response>"], "first"),
    # Real vocabularies rebuilt from llama.cpp's GGUF files with the families' own templates (tests/gguf_vocab.py).
    "command-r-plus": (["<|END_OF_TURN_TOKEN|>"], "first"),
    "llama3.1": (["<|eot_id|>", "<|eom_id|>"], "first"),
    "llama3.2": (["<|eot_id|>", "<|eom_id|>"], "first"),
    "hermes3": (["<|im_end|>"], "first"),
    "gemma4": (["<turn|>", "<|tool_response>"], "first"),
    "qwen3.5": (["<|im_end|>"], "first"),
    "command-r7b": (["<|END_OF_TURN_TOKEN|>"], "first"),
    "llama3.3": (["<|eot_id|>", "<|eom_id|>"], "first"),
    "functionary-v3.2": (["<|eot_id|>"], "first"),
    "deepseek-r1-distill-llama": (["<｜end▁of▁sentence｜>"], "first"),
    "qwq": (["<|im_end|>"], "first"),
    # Real templates over qwen3's vocabulary with their control tokens added (tests/conftest.py REAL).
    "command-r-plus-tooluse": (["<|END_OF_TURN_TOKEN|>"], "first"),
    "gemma-4": (["<turn|>", "<|tool_response>"], "first"),
    "hermes-3-tooluse": (["<|im_end|>"], "first"),
    "glm-4.6": (["<|user|>", "<|observation|>", "<|endoftext|>"], "first"),
    "granite-3.3": (["<|end_of_text|>"], "first"),
    "mistral-nemo": (["</s>"], "first"),
    "llama-3.1": (["<|eot_id|>", "<|eom_id|>"], "first"),
    "llama-3.2": (["<|eot_id|>", "<|eom_id|>"], "first"),
    "qwen3-coder": (["<|im_end|>"], "first"),
    "deepseek-v3.1": (["<｜end▁of▁sentence｜>"], "first"),
    "kimi-k2": (["<|im_end|>"], "first"),
}

# Control-token text a user, a tool or a schema may carry, per template (its own tokens and some of its vocabulary's).
INJECT = {
    "demo": ["<|im_start|>", "<|im_end|>"],
    "qwen3": ["<|im_start|>", "<|im_end|>", "</think>", "<tool_call>", "<|endoftext|>"],
    "qwen2.5": ["<|im_start|>", "<|im_end|>", "</tool_response>", "<think>"],
    "phi3": ["<|end|>", "<|user|>", "<|assistant|>"],
    "gpt-oss": ["<|start|>", "<|end|>", "<|message|>", "<|call|>", "<|return|>"],
    "smollm3": ["<|im_start|>", "<|im_end|>", "<think>"],
    "deepseek-r1-distill": ["<｜User｜>", "<｜end▁of▁sentence｜>", "</think>", "<｜Assistant｜>"],
    "rerender-tooluse": ["<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|CHATBOT_TOKEN|>"],
    "calls-only": ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_response>"],
    "role-headers": ["<|user|>", "<|observation|>", "<|assistant|>", "</think>"],
    "drops-calls": ["<|start_of_role|>", "<|end_of_text|>"],
    "prefill-turns": ["<|turn>", "<turn|>", "<|tool_response>"],
    "command-r-plus": ["<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|CHATBOT_TOKEN|>", "<BOS_TOKEN>"],
    "llama3.1": ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|python_tag|>", "<|begin_of_text|>"],
    "llama3.2": ["<|start_header_id|>", "<|eot_id|>", "<|eom_id|>"],
    "hermes3": ["<|im_start|>", "<|im_end|>", "<|eot_id|>"],
    "gemma4": ["<|turn>", "<turn|>", "<|tool_call>", '<|"|>', "<|channel>", "<bos>"],
    "qwen3.5": ["<|im_start|>", "<|im_end|>", "<tool_call>", "</think>", "<|endoftext|>"],
    "command-r7b": ["<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|START_ACTION|>", "<|END_RESPONSE|>"],
    "llama3.3": ["<|start_header_id|>", "<|eot_id|>", "<|python_tag|>"],
    "functionary-v3.2": ["<|start_header_id|>", "<|eot_id|>", "<|reserved_special_token_1|>"],
    "deepseek-r1-distill-llama": ["<｜User｜>", "<｜end▁of▁sentence｜>", "<｜Assistant｜>", "<|eot_id|>"],
    "qwq": ["<|im_start|>", "<|im_end|>", "<tool_call>", "</think>", "<|endoftext|>"],
    "command-r-plus-tooluse": ["<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|CHATBOT_TOKEN|>"],
    "gemma-4": ["<|turn>", "<turn|>", "<|tool_response>", "<|channel>", '<|"|>'],
    "hermes-3-tooluse": ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_response>"],
    "glm-4.6": ["<|user|>", "<|observation|>", "<|assistant|>", "</think>", "<arg_key>"],
    "granite-3.3": ["<|start_of_role|>", "<|end_of_text|>", "<|tool_call|>"],
    "mistral-nemo": ["[INST]", "[/INST]", "[TOOL_CALLS]", "</s>"],
    "llama-3.1": ["<|start_header_id|>", "<|eot_id|>", "<|python_tag|>", "<|eom_id|>"],
    "llama-3.2": ["<|start_header_id|>", "<|eot_id|>", "<|end_header_id|>"],
    "qwen3-coder": ["<|im_start|>", "<|im_end|>", "<tool_call>", "</think>"],
    "deepseek-v3.1": ["<｜User｜>", "<｜Assistant｜>", "<｜tool▁calls▁begin｜>", "</think>"],
    "kimi-k2": ["<|im_user|>", "<|im_end|>", "<|im_middle|>", "<|tool_call_begin|>"],
}
for _name, _family in FAMILIES.items():
    END_OF_TURN[_name] = (list(_family.end_of_turn), _family.which)
    INJECT[_name] = list(_family.inject)

# Tool-use variants of templates (the ``tool_use`` of a family's named templates): they iterate over the tools and
# fail without them, and are served only to calls that offer tools.
TOOLS_REQUIRED = {"command-r-plus", "hermes3", "command-r7b", "command-r-plus-tooluse", "hermes-3-tooluse"} | {
    n for n, f in FAMILIES.items() if f.tools == "required"
}

# Templates that cannot represent tool calls (Phi-3 and SmolLM3 render content only; the DeepSeek distill and
# Functionary templates concatenate arguments as a string, which serving engines hand them as a dict): replayed
# without tool turns.
NO_TOOLS = {"phi3", "smollm3", "deepseek-r1-distill", "deepseek-r1-distill-llama", "functionary-v3.2"} | {
    n for n, f in FAMILIES.items() if f.tools == "none"
}

# Templates that render one tool call per assistant message.
SINGLE_CALL = {"gpt-oss", "llama3.1", "llama3.2", "llama3.3", "llama-3.1", "llama-3.2"} | {
    n for n, f in FAMILIES.items() if f.tools == "single"
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
    created: int | None = None  # the call's time (templates that print the date see its UTC date)
    engine: bool = False
    prompt_ids: list[int] | None = None
    choice_ids: list[list[int]] = field(default_factory=list)
    choice_logprobs: list[list[float]] = field(default_factory=list)
    parsed_content: bool = False  # the engine's prompt parsed control text in content (it differs from plain)


def _text(rng: random.Random, lo: int = 2, hi: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


# 2025-03-01 23:40 UTC: a run of calls a few minutes apart crosses midnight.
START = int(dt.datetime(2025, 3, 1, 23, 40, tzinfo=dt.UTC).timestamp())


class RunGenerator:
    """Random agent runs: tool calls (parallel too), reasoning, edits, compactions, n>1 samples; with ``hard`` a
    share of the sessions also carries the hard cases: reasoning inline in assistant content, control-token text in
    user, system and tool content, in tool-call argument keys and tool-schema property names, private-use
    characters, null content and calls whose times cross midnight."""

    def __init__(self, seed: int, template: str, *, with_tools: bool = True, hard: float = 0.0):
        self.rng = random.Random(seed)
        self.template = template
        self.with_tools = with_tools
        self.ids = 0
        r = self.rng
        self.inline = r.random() < hard
        self.inject = r.random() < hard
        self.keys = r.random() < hard
        self.private = r.random() < hard

    def _call_id(self) -> str:
        self.ids += 1
        return f"call{self.ids:05d}"  # nine alphanumeric characters, as Mistral's templates require

    def _control(self) -> str:
        return self.rng.choice(INJECT[self.template])

    def _content(self, lo: int = 2, hi: int = 12) -> str:
        """User, system or tool text, sometimes carrying control-token text or private-use characters."""
        rng = self.rng
        words = _text(rng, lo, hi).split(" ")
        if self.inject and rng.random() < 0.5:
            words.insert(rng.randint(0, len(words)), rng.choice(["", "x", "see "]) + self._control() + ")")
        if self.private and rng.random() < 0.4:
            words.insert(rng.randint(0, len(words)), "keep\ue000these\ue001\ue002")
        return " ".join(words)

    def assistant(self, *, allow_tools: bool) -> dict[str, Any]:
        rng = self.rng
        msg: dict[str, Any] = {"role": "assistant", "content": _text(rng)}
        if self.inline and rng.random() < 0.5:
            # What a server without a reasoning parser returns: the reasoning inline in content.
            msg["content"] = f"<think>\n{_text(rng, 3, 10)}\n</think>\n\n{msg['content']}"
        elif rng.random() < 0.5:
            msg["reasoning_content"] = _text(rng, 3, 15)
        if allow_tools and self.with_tools and rng.random() < 0.45:
            n = 1 if self.template in SINGLE_CALL else rng.choice([1, 1, 2])
            calls = []
            for _ in range(n):
                name = rng.choice(["search", "read_file"])
                key = "query" if name == "search" else "path"
                if self.keys and rng.random() < 0.5:
                    key += self._control()
                args = {key: _text(rng, 1, 4)} if name == "search" else {key: f"/tmp/{rng.randint(1, 99)}.txt"}
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

    def _tools(self) -> list[dict[str, Any]]:
        tools = copy.deepcopy(TOOLS)
        if self.keys:
            props = tools[0]["function"]["parameters"]["properties"]
            props["filter" + self._control()] = {"type": "string", "description": "a schema key with control text"}
        return tools

    def run(self, n_turns: int) -> list[Call]:
        rng = self.rng
        # (rng drawn first either way: a template's runs stay the same whether or not it requires tools)
        tools = self._tools() if self.with_tools and (rng.random() < 0.8 or self.template in TOOLS_REQUIRED) else None
        history: list[dict[str, Any]] = []
        if rng.random() < 0.8:
            history.append({"role": "system", "content": "You are an agent. " + self._content()})
        history.append({"role": "user", "content": self._content()})
        calls: list[Call] = []
        when = START - rng.randint(0, 3600)
        for _ in range(n_turns):
            n = rng.choice([1, 1, 1, 2])
            choices = [self.assistant(allow_tools=True) for _ in range(n)]
            when += rng.randint(60, 900)
            calls.append(Call(copy.deepcopy(history), tools, choices, when))
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
                        "content": self._content(1, 8),
                    }
                )
            if not chosen.get("tool_calls"):
                history.append({"role": "user", "content": self._content()})
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


@contextlib.contextmanager
def pinned_clock(created: int | None) -> Iterator[None]:
    """Templates' ``strftime_now`` reads the call's UTC time (transformers looks ``datetime`` up in its chat-template
    module when the template calls it)."""
    if created is None:
        yield
        return
    from transformers.utils import chat_template_utils as ctu

    real = ctu.datetime
    when = dt.datetime.fromtimestamp(created, tz=dt.UTC)

    class _Pinned(dt.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return when if tz is None else when.astimezone(tz)

    ctu.datetime = _Pinned  # type: ignore[misc]
    try:
        yield
    finally:
        ctu.datetime = real  # type: ignore[misc]


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


class Oracle:
    """Expected ids for one template (see the module docstring)."""

    def __init__(self, hf: Any, template: str):
        self.hf = hf
        self.template = template
        added = hf.added_tokens_encoder
        self.added = added
        self.added_re = re.compile("|".join(map(re.escape, sorted(added, key=len, reverse=True))))
        decoder = hf.added_tokens_decoder
        self.lstrip = {t.content: bool(t.lstrip) for t in decoder.values()}
        self.rstrip = {t.content: bool(t.rstrip) for t in decoder.values()}
        self.sentinel = "⟪oracle-sentinel⟫"
        self._plain: tuple[Any, Any, int] | None = None
        self._memo: dict[str, list[int]] = {}
        self.train_dropped = False  # expect turns whose template dropped their text or calls (--train-dropped)

    def _plain_tokenizers(self) -> tuple[Any, Any, int]:
        """The vocabulary with no added token (plain text), the same with only a sentinel added token, its id.

        One tokenizer serves as both: text without the sentinel encodes as if it were not there (an added token
        only splits where its own text occurs). It is built around the backend's own model, normalizer,
        pre-tokenizer and decoder, shared rather than copied (a copy of a 256k vocabulary takes seconds to build and
        holds its own memory); that it serializes as the backend's JSON without its added tokens (plus the sentinel)
        would is checked in tests/test_linearize_shortcuts.py."""
        if self._plain is None:
            from tokenizers import AddedToken, Tokenizer

            backend = self.hf.backend_tokenizer
            after = Tokenizer(backend.model)
            after.normalizer = backend.normalizer
            after.pre_tokenizer = backend.pre_tokenizer
            after.post_processor = backend.post_processor
            after.decoder = backend.decoder
            after.add_special_tokens([AddedToken(self.sentinel, special=True, normalized=False)])
            sentinel_id = after.token_to_id(self.sentinel)
            assert sentinel_id is not None
            self._plain = (after, after, sentinel_id)
        return self._plain

    # ------------------------------------------------------------------ rendering
    def _protect(self, value: Any, table: dict[str, str]) -> Any:
        if isinstance(value, str):

            def place(m: re.Match[str]) -> str:
                key = f"ZQX{len(table)}XQZ"
                table[key] = m.group(0)
                return key

            return self.added_re.sub(place, value)
        if isinstance(value, dict):
            return {self._protect(k, table): self._protect(v, table) for k, v in value.items()}
        if isinstance(value, list):
            return [self._protect(v, table) for v in value]
        return value

    def _placeheld(
        self, messages: list[dict[str, Any]], tools: Any, table: dict[str, str]
    ) -> tuple[list[dict[str, Any]], Any]:
        out = []
        for m in oracle_messages(messages):
            if m["role"] == "assistant":
                # The policy's own text stays; what it called (names, ids, argument keys and values) is content.
                m = {
                    k: (v if k in ("role", "content", "reasoning_content") else self._protect(v, table))
                    for k, v in m.items()
                }
            else:
                m = self._protect(m, table)
            out.append(m)
        return out, self._protect(tools, table) if tools else tools

    def text(self, messages: list[dict[str, Any]], tools: Any, gen: bool, created: int | None) -> str:
        with pinned_clock(created):
            return str(self.hf.apply_chat_template(messages, tools=tools, add_generation_prompt=gen, tokenize=False))

    def engine_ids(self, messages: list[dict[str, Any]], tools: Any, gen: bool, created: int | None) -> list[int]:
        """What a serving engine feeds the policy: the rendering tokenized, control-token text parsed wherever."""
        with pinned_clock(created):
            out = self.hf.apply_chat_template(
                oracle_messages(messages), tools=tools, add_generation_prompt=gen, tokenize=True, return_dict=False
            )
        return list(out)

    def ids(self, messages: list[dict[str, Any]], tools: Any, gen: bool, created: int | None) -> list[int]:
        """The contract: content's control-token text is plain text of its stretch (memoised per input)."""
        key = json.dumps([messages, tools, gen, created], sort_keys=True)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._ids(messages, tools, gen, created)
        return list(hit)

    def _ids(self, messages: list[dict[str, Any]], tools: Any, gen: bool, created: int | None) -> list[int]:
        table: dict[str, str] = {}
        msgs, schemas = self._placeheld(messages, tools, table)
        text = self.text(msgs, schemas, gen, created)
        whole = list(self.hf.encode(text, add_special_tokens=False))
        if not table:
            return whole
        controls = list(self.added_re.finditer(text))
        added_ids = set(self.added.values())
        # The template's own tokens split both the text and its ids (HF splits on added tokens first).
        cuts = [i for i, t in enumerate(whole) if t in added_ids]
        assert len(cuts) == len(controls), "placeholders must leave only the template's own added tokens"
        out: list[int] = []
        pos = 0
        prev_cut = -1
        holder = re.compile("|".join(map(re.escape, table)))
        for k in range(len(controls) + 1):
            end = controls[k].start() if k < len(controls) else len(text)
            stretch = text[pos:end]
            ids = whole[prev_cut + 1 : cuts[k] if k < len(cuts) else len(whole)]
            if holder.search(stretch):
                real = holder.sub(lambda m: table[m.group(0)], stretch)
                if k > 0 and self.rstrip[controls[k - 1].group(0)]:
                    real = real.lstrip()
                if k < len(controls) and self.lstrip[controls[k].group(0)]:
                    real = real.rstrip()
                ids = self._plain_ids(real, initial=pos == 0)
            out.extend(ids)
            if k < len(controls):
                out.append(whole[cuts[k]])
                pos = controls[k].end()
                prev_cut = cuts[k]
        return out

    def _plain_ids(self, text: str, *, initial: bool) -> list[int]:
        if not text:
            return []
        plain, after, sentinel_id = self._plain_tokenizers()
        if initial:
            return list(plain.encode(text, add_special_tokens=False).ids)
        ids = after.encode(self.sentinel + text, add_special_tokens=False).ids
        assert ids[0] == sentinel_id
        return list(ids[1:])

    # ------------------------------------------------------------------ turns
    def expected_turn(
        self, ctx: list[dict[str, Any]], tools: Any, msg: dict[str, Any], created: int | None
    ) -> tuple[list[int], list[int]] | None:
        """:meth:`rendered_turn`, or None for a turn whose completion lost the message's text or one of its tool
        calls (the template dropped it), which is not trained unless :attr:`train_dropped`."""
        turn = self.rendered_turn(ctx, tools, msg, created)
        if turn is None or self.train_dropped:
            return turn
        text = self.hf.decode(turn[1])
        content = msg.get("content")
        if isinstance(content, str):
            visible = content.rsplit("</think>", 1)[-1].strip()
            if visible and visible not in text:
                return None
        names = [tc["function"]["name"] for tc in msg.get("tool_calls") or ()]
        if any(text.count(n) < names.count(n) for n in set(names)):
            return None
        return turn

    def rendered_turn(
        self, ctx: list[dict[str, Any]], tools: Any, msg: dict[str, Any], created: int | None
    ) -> tuple[list[int], list[int]] | None:
        """(prompt ids, completion ids) per the spec, or None when the template cannot render the turn after its
        prompt.

        In ids, independently of msgtrain's text-level rule: when the turn's rendering does not extend the prompt,
        the completion is what the message's rendering inserts into the context's, after the generation prompt's
        header (the prompt's ids after the context's; or the part of it before one of its control tokens, when
        history renders no prefill). A completion without an end-of-turn token ends with the token the template
        writes before a following message, when that token is one of the template's end-of-turn tokens; else with
        the vocabulary's EOS."""
        try:
            p = self.ids(ctx, tools, True, created)
            full = self.ids([*ctx, msg], tools, False, created)
        except Exception:  # jinja errors, raise_exception(...): the template cannot render this turn at all
            return None
        rest = full[len(p) :] if full[: len(p)] == p else self._continued(p, full)
        if rest is None:
            rest = self._inserted(ctx, tools, msg, full, p, created)
            empty_header = p == self.ids(ctx, tools, False, created)
            if rest is not None and self._holds_another(ctx, msg, p, rest, empty_header):
                # History renders the context differently away from the reply (NeMo's system prompt lives only in
                # the last user message): the message's own rendering where history puts it, when that place ends
                # as the prompt does; else the turn is not trained.
                rest = self._own_rendering(ctx, tools, full, p, created)
            if rest is None:
                return None
        ends, which = END_OF_TURN[self.template]
        end_ids = {self.hf.convert_tokens_to_ids(t) for t in ends}
        pos = [i for i, t in enumerate(rest) if t in end_ids]
        if pos:
            cut = pos[0] if which == "first" else pos[-1]
            return p, rest[: cut + 1]
        while rest and not self.hf.decode(rest[-1:]).strip():
            rest = rest[:-1]

        # What stopped generation: the token the template writes before what follows the message (which may render
        # the message itself differently, e.g. without its reasoning, but not its end).
        def after(text: str) -> list[dict[str, Any]]:
            if msg.get("tool_calls"):
                return [
                    {"role": "tool", "tool_call_id": tc["id"], "name": tc["name"], "content": text}
                    for tc in msg["tool_calls"]
                ]
            return [{"role": "user", "content": text}]

        try:
            followed = self.ids([*ctx, msg, *after("next")], tools, False, created)
            other = self.ids([*ctx, msg, *after("other words")], tools, False, created)
        except Exception:
            return (p, rest) if rest else None
        limit = 0  # where the follower's text begins: the two renderings part there
        while limit < min(len(followed), len(other)) and followed[limit] == other[limit]:
            limit += 1
        tail = rest[-3:]
        ends_at = [j + len(tail) for j in range(limit - len(tail), -1, -1) if followed[j : j + len(tail)] == tail]
        if ends_at:
            k = ends_at[0]
            while k < limit and not self.hf.decode(followed[k : k + 1]).strip():
                k += 1
            if k < limit and followed[k] in end_ids:
                return p, rest + followed[ends_at[0] : k + 1]
        if not rest:
            return None
        # A template that marks no end of this turn at all: the model stopped on its EOS, after the text (its
        # trailing whitespace, the template's, stripped: the plain text after the completion's last template token
        # re-encoded without it).
        added_ids = set(self.added.values())
        last = max((i for i, t in enumerate(rest) if t in added_ids), default=-1)
        tail = self.hf.decode(rest[last + 1 :])
        if tail != tail.rstrip():
            rest = rest[: last + 1] + self._plain_ids(tail.rstrip(), initial=False)
        return p, [*rest, self.hf.eos_token_id]

    def _holds_another(
        self, ctx: list[dict[str, Any]], msg: dict[str, Any], p: list[int], rest: list[int], empty_header: bool
    ) -> bool:
        """Whether a completion holds another message: for a template whose generation prompt is empty, the
        prompt's last token when it is a template token (the one that closes the user's turn and opens the
        model's) before its end; or the content of a context message (8 characters or more) that the message
        itself does not hold."""
        # A reply that reasons may close its reasoning with the very token a prefill of an empty reasoning block
        # ends the prompt with (Command R7B's <|END_THINKING|>): in it, that token is its own, not another turn's.
        reasons = bool(str(msg.get("reasoning_content") or "").strip())
        if empty_header and not reasons and p and p[-1] in set(self.added.values()) and p[-1] in rest[:-1]:
            return True
        text = self.hf.decode(rest)
        own = json.dumps(msg, ensure_ascii=False) + str(msg.get("content") or "")
        for m in ctx:
            content = m.get("content")
            if isinstance(content, str) and len(content.strip()) >= 8:
                c = content.strip()
                if c in text and c not in own:
                    return True
        return False

    def _own_rendering(
        self, ctx: list[dict[str, Any]], tools: Any, full: list[int], p: list[int], created: int | None
    ) -> list[int] | None:
        """The message's rendering in ``full`` (ids) from where the renderings of the context followed by two other
        replies part from it, after the generation header when history renders one; None when that place does not
        end as the prompt does."""
        stands = [
            self.ids([*ctx, {"role": "assistant", "content": f"{c} stand-in"}], tools, False, created) for c in "xy"
        ]

        def lcp(x: list[int], y: list[int]) -> int:
            n = 0
            while n < min(len(x), len(y)) and x[n] == y[n]:
                n += 1
            return n

        k = min(lcp(full, stands[0]), lcp(stands[0], stands[1]))
        a = self.ids(ctx, tools, False, created)
        header = p[len(a) :] if p[: len(a)] == a else []
        if header:
            hits = [j for j in range(k - len(header), -1, -1) if full[j : j + len(header)] == header]
            if not hits:
                return None
            start = hits[0] + len(header)
        else:
            if k == 0 or not p or full[k - 1] != p[-1] or p[-1] not in set(self.added.values()):
                return None
            start = k
        tail = 0
        while tail < min(len(a), len(full) - start) and a[-1 - tail] == full[-1 - tail]:
            tail += 1
        return full[start : len(full) - tail] or None

    def _continued(self, p: list[int], full: list[int]) -> list[int] | None:
        """The completion when the turn's rendering extends the prompt's text but not its ids: the prompt's last
        stretch of plain text merges with what follows it (Qwen3.5's prompt ends ``<think>`` + "\n", its message
        renders ``<think>`` + "\n\n"). The model saw the prompt's ids and sampled the rest of the text: the
        stretch's remaining text encoded as a continuation, then the rendering's ids from its next added token."""
        j = 0
        while j < min(len(p), len(full)) and p[j] == full[j]:
            j += 1
        added_ids = set(self.added.values())
        if j == len(p) or any(t in added_ids for t in p[j:]):
            return None  # the prompt's tail is re-rendered, not continued
        m = next((k for k in range(j, len(full)) if full[k] in added_ids), len(full))
        plain = self._plain_tokenizers()[0]
        head, stretch = plain.decode(p[j:]), plain.decode(full[j:m])
        if not head or not stretch.startswith(head) or "\ufffd" in head + stretch:
            return None
        return self._plain_ids(stretch[len(head) :], initial=False) + full[m:]

    def _header_cuts(self, header: list[int]) -> set[int]:
        """Where the generation prompt's header may end before a prefill: before one of its added tokens, or after
        one and the whitespace after it."""
        added_ids = set(self.added.values())
        cuts = set()
        for k, t in enumerate(header):
            if t in added_ids:
                end = k + 1
                while end < len(header) and not self.hf.decode(header[end : end + 1]).strip():
                    end += 1
                cuts.update({k, end} if end > k + 1 else {k})
        return {k for k in cuts if 0 < k < len(header)}

    def _inserted(
        self,
        ctx: list[dict[str, Any]],
        tools: Any,
        msg: dict[str, Any],
        full: list[int],
        p: list[int],
        created: int | None,
    ) -> list[int] | None:
        """The completion's ids: what the message's rendering inserts into the context's, after the header."""
        a = self.ids(ctx, tools, False, created)
        if p[: len(a)] != a:
            # The context's last token merges with the header's first (">" + "\n\n"): located in text instead.
            return self._inserted_text(ctx, tools, msg, full, created)
        header = p[len(a) :]
        lcp = 0
        while lcp < min(len(a), len(full)) and a[lcp] == full[lcp]:
            lcp += 1
        cuts = sorted(self._header_cuts(header), reverse=True)
        for h in [header, *(header[:k] for k in cuts), []]:
            if not h and header:
                # No part of the header in the ids: history may render it with its last token merged into the
                # message's first ("\n" + "\n"), which the text shows; else it continues an open turn (Apertus).
                by_text = self._inserted_text(ctx, tools, msg, full, created)
                if by_text is not None:
                    return by_text
            if not h:
                i = lcp
            else:
                i = next(
                    (j for j in range(max(0, lcp - len(h) + 1), len(full) - len(h) + 1) if full[j : j + len(h)] == h),
                    -1,
                )
                if i < 0:
                    continue
            if len(h) < len(header):
                # A shorter header: the text may show a longer one whose last token history merges into the
                # message's first (Apriel 1.6's "\n" + "\n" after <|begin_assistant|>).
                by_text = self._inserted_text(ctx, tools, msg, full, created)
                if by_text is not None:
                    return by_text
            start = i + len(h)
            end = _insertion_end(a, full, i, len(h), lcp)
            return full[self._past_closing(header[len(h) :], full, start, end) : end]
        return None

    def _past_closing(self, prefill: list[int], full: list[int], start: int, end: int) -> int:
        """``start`` moved past the prefill's closing part when the message's rendering starts with it (DeepSeek
        V3.2 prompts ``<think></think>``, renders ``</think>`` + content): from one of its added tokens on."""
        added_ids = set(self.added.values())
        for c, t in enumerate(prefill):
            tail = prefill[c:]
            if t in added_ids and full[start : start + len(tail)] == tail and start + len(tail) <= end:
                return start + len(tail)
        return start

    def _inserted_text(
        self, ctx: list[dict[str, Any]], tools: Any, msg: dict[str, Any], full: list[int], created: int | None
    ) -> list[int] | None:
        """``_inserted`` located in the renderings' text, mapped onto ``full``'s ids: from a token boundary, or
        from inside a plain token, whose rest is then the plain text it holds after that point re-encoded as a
        continuation (the model sampled after the prompt); to a token boundary (None otherwise)."""
        a = self.text(oracle_messages(ctx), tools, False, created)
        p = self.text(oracle_messages(ctx), tools, True, created)
        f = self.text(oracle_messages([*ctx, msg]), tools, False, created)
        if not p.startswith(a) or len(p) == len(a):
            return None
        header = p[len(a) :]
        lcp = 0
        while lcp < min(len(a), len(f)) and a[lcp] == f[lcp]:
            lcp += 1
        cuts: set[int] = set()
        for m in self.added_re.finditer(header):
            after = header[m.end() :]
            cuts.update({m.start(), m.end() + len(after) - len(after.lstrip())} if after[:1].isspace() else {m.start()})
        for cut in [len(header), *sorted((k for k in cuts if 0 < k < len(header)), reverse=True)]:
            i = f.find(header[:cut], max(0, lcp - cut + 1))
            if i < 0:
                continue
            start = i + cut
            end = _insertion_end(a, f, i, cut, lcp)
            prefill = header[cut:]
            for m in self.added_re.finditer(prefill):
                if f.startswith(prefill[m.start() :], start) and start + len(prefill) - m.start() <= end:
                    start += len(prefill) - m.start()
                    break

            # Token boundaries of ``full`` (its text is ``f``): the first prefix whose decoded text reaches a place.
            def length(k: int) -> int:
                return len(self.hf.decode(full[:k]))

            def reaching(pos: int) -> int:
                return bisect.bisect_left(range(len(full) + 1), pos, key=length)

            k_end = reaching(end)
            if k_end > len(full) or length(k_end) != end:
                return None
            k = reaching(start)
            if length(k) == start:
                return full[k:k_end]
            k -= 1  # the token that holds the place
            if full[k] in set(self.added.values()) or length(k + 1) > end:
                return None
            return self._plain_ids(f[start : length(k + 1)], initial=False) + full[k + 1 : k_end]
        return None


def _insertion_end(a: Any, full: Any, i: int, header: int, lcp: int) -> int:
    """Where the message's insertion into the context's rendering ``a`` ends in ``full`` (ids or text), its header
    found at ``i``: where ``a`` resumes after it, else where the two share their tail again."""
    grown = len(full) - len(a)
    if i <= lcp and grown >= header and full[i + grown :] == a[i:]:
        return i + grown
    start = i + header
    tail = 0
    while tail < min(len(a) - lcp, len(full) - start) and a[-1 - tail] == full[-1 - tail]:
        tail += 1
    return len(full) - tail


def non_canonical(hf: Any, ids: list[int]) -> list[int]:
    """Re-spell one multi-character token as several smaller tokens that decode to the same text."""
    for i, t in enumerate(ids):
        piece = hf.convert_ids_to_tokens(t)
        if isinstance(piece, str) and len(piece) >= 3 and t not in hf.all_special_ids and piece.isalpha():
            parts = [hf.convert_tokens_to_ids(piece[:1]), hf.convert_tokens_to_ids(piece[1:])]
            if all(isinstance(x, int) and x != hf.unk_token_id for x in parts):
                return [*ids[:i], *parts, *ids[i + 1 :]]
    return ids


def to_records(oracle: Oracle, calls: list[Call], rng: random.Random, engine_share: float) -> list[dict[str, Any]]:
    """Per-call JSONL records; some carry vLLM engine ids (sometimes non-canonical; gpt-oss ends its sampled turns
    in ``<|return|>``/``<|call|>`` where the template re-renders ``<|end|>``) and logprobs."""
    hf = oracle.hf
    records = []
    for k, c in enumerate(calls):
        engine = rng.random() < engine_share
        choices = []
        resp: dict[str, Any] = {"id": f"r{k}", "model": "m", "created": c.created, "choices": choices}
        if engine:
            try:
                prompt = oracle.engine_ids(c.context, c.tools, True, c.created)
            except Exception:  # a template that cannot render this context: no engine served it either
                engine, prompt = False, None
        else:
            prompt = None
        c.engine = engine
        c.prompt_ids = prompt
        c.parsed_content = engine and prompt != oracle.ids(c.context, c.tools, True, c.created)
        for j, msg in enumerate(c.choices):
            wire = dict(msg)
            if "tool_calls" in wire:
                wire["tool_calls"] = [
                    {"id": tc["id"], "type": "function", "function": tc["function"]} for tc in wire["tool_calls"]
                ]
            choice: dict[str, Any] = {"index": j, "message": wire, "finish_reason": "stop"}
            if engine:
                # What the engine sampled: the template's rendering, for a reply it renders whole (sampled ids hold
                # the reply's text and calls; a rendering that lost them is no model's sample: logged without ids).
                exp = oracle.expected_turn(c.context, c.tools, msg, c.created)
                ids: list[int] = [] if exp is None else exp[1]
                if ids and oracle.template == "gpt-oss" and ids[-1] == hf.convert_tokens_to_ids("<|end|>"):
                    ids = [*ids[:-1], hf.convert_tokens_to_ids("<|call|>" if msg.get("tool_calls") else "<|return|>")]
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
    flag: str | None = None  # the flag its samples must carry

    @property
    def full(self) -> list[int]:
        return self.prompt + self.completion


def expected_turns(oracle: Oracle, calls: list[Call]) -> list[ExpectedTurn]:
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
                flag = "engine_parsed_special_tokens" if c.parsed_content else None
                out.append(ExpectedTurn(c.prompt_ids, c.choice_ids[j], c.choice_logprobs[j], flag))
            else:
                exp = oracle.expected_turn(c.context, c.tools, msg, c.created)
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
