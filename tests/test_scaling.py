"""Regression guard for linear cost, with no timing: the tokenizer work per converted token must not grow with turns.

The linearizer renders each turn's context and must tokenize only what is new since an earlier turn (issue 7). A
path that re-tokenizes the whole context per turn (what per-call RL stacks do) makes the tokens encoded per converted
token grow linearly with the number of turns; these tests convert 8-, 32- and 128-turn conversations (native graphs
and per-call logs, prefix-stable and reasoning-stripping templates) and compare the TokenizerBundle counters.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import corpus as gen
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph
from msgtrain.ingest.formats.api.calls import READER as CALLS_READER
from msgtrain.linearize import linearize_graph
from tests.conftest import load_named_tokenizer

TURNS = (8, 32, 128)
MAX_GROWTH = 1.5  # the ratio at 128 turns may be at most this multiple of the ratio at 8 turns
# (template name, reasoning in the logs): qwen2.5 renders history unchanged; qwen3 strips earlier reasoning
# at every new user message, so every episode starts a new sample.
CASES = [("demo", False), ("qwen2.5", False), ("qwen3", True)]


def _graphs(conv: gen.Conversation, source: str, tmp_path: Path) -> Any:
    if source == "native":
        return gen.conversation_graph(conv, model="policy")
    path = tmp_path / f"{conv.session}.jsonl"
    gen.write_calls(path, [conv], model="policy")
    (graph,) = [ev.graph for ev in read_events(CALLS_READER, path) if isinstance(ev, ReadGraph)]
    return graph


def _counts(tok: Any, graph: Any) -> dict[str, float]:
    """Tokenizer work for one conversation, per converted (exported) token and per sampled turn (its own: nothing
    the run memoized before it counts)."""
    tok.clear_run_memos()
    calls, tokens, chars = tok.encode_calls, tok.encoded_tokens, tok.encoded_chars
    res = linearize_graph(graph, tok)
    out_tokens = sum(s.num_tokens for s in res.samples)
    turns = sum(len(s.turn_ids) for s in res.samples)
    assert not res.drops, res.drops
    return {
        "tokens_per_token": (tok.encoded_tokens - tokens) / out_tokens,
        "chars_per_token": (tok.encoded_chars - chars) / out_tokens,
        "calls_per_turn": (tok.encode_calls - calls) / turns,
        "turns": turns,
    }


def _growth(tok: Any, conversations: dict[int, gen.Conversation], source: str, tmp_path: Path) -> dict[int, Any]:
    return {turns: _counts(tok, _graphs(conv, source, tmp_path)) for turns, conv in conversations.items()}


def _assert_linear(counts: dict[int, dict[str, float]]) -> None:
    first, last = counts[min(counts)], counts[max(counts)]
    assert last["turns"] == max(counts)
    for key in ("tokens_per_token", "chars_per_token", "calls_per_turn"):
        assert last[key] <= MAX_GROWTH * first[key], (
            f"{key} grows with conversation length: "
            + ", ".join(f"{t} turns {c[key]:.2f}" for t, c in counts.items())
            + " (a path re-tokenizes whole contexts per turn: quadratic)"
        )


@pytest.mark.parametrize("source", ["native", "calls"])
@pytest.mark.parametrize(("template", "reasoning"), CASES)
def test_tokens_encoded_per_converted_token_do_not_grow_with_turns(
    template: str, reasoning: bool, source: str, tmp_path: Path
) -> None:
    tok = load_named_tokenizer(template)
    pool = gen.synthetic_pool()
    conversations = {t: gen.make_conversation(pool, t, seed=t, reasoning=reasoning, session=f"c{t}") for t in TURNS}
    _assert_linear(_growth(tok, conversations, source, tmp_path))


@pytest.mark.parametrize("template", ["demo", "qwen2.5"])
def test_control_token_text_in_a_tool_result_keeps_the_cost_linear(template: str, tmp_path: Path) -> None:
    # A tool result that prints the tokenizer's own control tokens (an agent reading a chat template, a log of raw
    # prompts) is rendered with markers and encoded with the safe encoder; that must stay incremental too.
    tok = load_named_tokenizer(template)
    pool = gen.synthetic_pool()
    conversations = {}
    for t in TURNS:
        conv = gen.make_conversation(pool, t, seed=t, reasoning=False, session=f"m{t}")
        tool = next(m for m in conv.messages if m["role"] == "tool")
        tool["content"] = "template says: <|im_start|>user\nhi<|im_end|>\n" + tool["content"]
        conversations[t] = conv
    counts = _growth(tok, conversations, "native", tmp_path)
    _assert_linear(counts)


def test_a_quadratic_encoder_fails_the_guard(tmp_path: Path) -> None:
    """The guard can fail: re-encoding every context from scratch (the naive approach) trips it. Up to 64 turns: the
    naive encoder's work per token grows about 6 times from 8 turns (past the 1.5 allowed) at a quarter of the cost of
    128 turns."""
    tok = load_named_tokenizer("demo")
    pool = gen.synthetic_pool()
    conversations = {t: gen.make_conversation(pool, t, seed=t, reasoning=False, session=f"q{t}") for t in (8, 32, 64)}
    original = tok.encode_from
    # No reuse of any kind: neither an earlier text's ids nor the segment caches (conversation's or shared).
    tok.encode_from = lambda base, text, marked=False, **_: original(None, text, marked)  # type: ignore[method-assign]
    try:
        counts = _growth(tok, conversations, "native", tmp_path)
    finally:
        del tok.encode_from
    with pytest.raises(AssertionError, match="grows with conversation length"):
        _assert_linear(counts)


def test_engine_ids_need_no_tokenizer_work(tmp_path: Path) -> None:
    tok = load_named_tokenizer("qwen2.5")
    conv = gen.make_conversation(gen.synthetic_pool(), 32, seed=3, reasoning=False, session="ids")
    path = tmp_path / "ids.jsonl"
    gen.write_calls(path, [conv], model="policy", engine=gen.EngineIds(tok.hf))
    (graph,) = [ev.graph for ev in read_events(CALLS_READER, path) if isinstance(ev, ReadGraph)]
    before = tok.encoded_tokens
    res = linearize_graph(graph, tok)
    assert sum(len(s.turn_ids) for s in res.samples) == 32
    assert [s.cut_reason for s in res.samples] == ["start"]
    assert tok.encoded_tokens == before
    assert json.loads(path.read_text().splitlines()[0])["response"]["prompt_token_ids"]


def test_incremental_marked_encoding_equals_the_full_encoding() -> None:
    """Reusing an earlier marked encoding gives exactly the ids of encoding the text whole, lone markers included
    (a template that cuts a marker pair leaves a start marker that a later text may close)."""
    import random

    import numpy as np

    from msgtrain.linearize.tokenizer import MARK_END, MARK_ESC, MARK_START

    tok = load_named_tokenizer("demo")
    atoms = ["<|im_start|>", "<|im_end|>", "\n", " hello", "wörld", MARK_START, MARK_END, MARK_ESC, "é"]
    atoms += [f"{MARK_START}<|im_start|>{MARK_END}", f"{MARK_START}x<|im_end|>y{MARK_END}"]
    atoms += [f"{MARK_ESC}{MARK_START}", f"{MARK_ESC}{MARK_ESC}", f"{MARK_ESC}{MARK_END}"]
    rng = random.Random(0)
    for _ in range(2000):
        base = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 20)))
        text = base[: rng.randint(0, len(base))] + "".join(rng.choice(atoms) for _ in range(rng.randint(0, 20)))
        got = tok.encode_from(tok.encode_full(base, True), text, True).ids
        assert np.array_equal(got, tok.encode_marked(text)), (base, text)


def _template_iterations(template: str, source: str, tmp_path: Path, control_tokens: bool = False) -> dict[int, float]:
    """Loop iterations the chat template ran per rendering, for 8-, 32- and 128-turn conversations."""
    from msgtrain.linearize.render import Renderer

    tok = load_named_tokenizer(template)
    pool = gen.synthetic_pool()
    out = {}
    for t in TURNS:
        conv = gen.make_conversation(pool, t, seed=t, reasoning=False, session=f"r{t}")
        if control_tokens:  # rendered with marked content from the first tool result on
            tool = next(m for m in conv.messages if m["role"] == "tool")
            tool["content"] = "template says: <|im_start|>user\nhi<|im_end|>\n" + tool["content"]
        tok.clear_run_memos()  # each conversation's own renderings, none from the run's memo
        renderer = Renderer(tok)
        renderer.min_traced = 0  # the replay itself is under test: short contexts too
        renderer.trace_verdict = None
        res = linearize_graph(_graphs(conv, source, tmp_path), tok, renderer=renderer)
        assert not res.drops
        assert renderer.traced_renders == renderer.renders  # every rendering (marked ones too) was traced
        out[t] = renderer.iterations_run / renderer.renders
    return out


def _assert_constant(per_render: dict[int, float]) -> None:
    assert per_render[TURNS[-1]] <= MAX_GROWTH * per_render[TURNS[0]], (
        f"template loop iterations per rendering grow with conversation length: {per_render}"
    )


@pytest.mark.parametrize("source", ["native", "calls"])
@pytest.mark.parametrize("template", ["demo", "qwen2.5"])
def test_template_work_per_rendering_does_not_grow_with_turns(template: str, source: str, tmp_path: Path) -> None:
    # Replayed rendering runs the template's loop only over the messages a context adds to the previous one's
    # (msgtrain.linearize.template): a path that renders every context in full makes this grow with the turns.
    # Prefix-stable templates only: Qwen3's template changes its state at every user message, so there the
    # loop runs in full once per episode.
    _assert_constant(_template_iterations(template, source, tmp_path))


@pytest.mark.parametrize("template", ["demo", "qwen2.5"])
def test_marked_rendering_keeps_template_work_constant(template: str, tmp_path: Path) -> None:
    _assert_constant(_template_iterations(template, "native", tmp_path, control_tokens=True))


def test_rendering_every_context_in_full_fails_the_guard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from msgtrain.linearize.template import RenderTrace

    monkeypatch.setattr(RenderTrace, "replay_limit", lambda self, shared: 0)
    with pytest.raises(AssertionError, match="grow with conversation length"):
        _assert_constant(_template_iterations("qwen2.5", "native", tmp_path))
