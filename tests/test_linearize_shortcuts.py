"""The linearizer's shortcuts change no output: each is checked against the path it replaces.

- segment ids shared by the whole run (the tokenizer's ``SegmentCache``) against every text encoded whole, on
  real logs and on seeded random conversations with several real tokenizers;
- short contexts rendered untraced (``Renderer.min_traced``) against every context traced;
- the backend's own decode against transformers' ``decode``;
- one plain-text tokenizer (a sentinel as its only added token) for text at the start of the input too, against a
  copy with no added token at all.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.registry import REGISTRY  # noqa: F401 - fills the registry
from msgtrain.linearize import linearize_graph
from msgtrain.linearize.render import (
    REPLAY_PAYS,
    TRACE_PAUSE,
    TRACE_PROBE,
    VERIFY_REPLAY,
    Renderer,
    TraceVerdict,
    render_cache,
)
from msgtrain.linearize.tokenizer import LARGEST_ENTRY, SegmentCache
from tests.conftest import load_named_tokenizer, shared_path

REAL = (
    "tau_bench/gpt-4o-airline.first20.json",
    "sharegpt_llamafactory/reason_tool_use_demo_50.jsonl",
)


def _graphs(rel: str) -> list[Any]:
    path = shared_path("real_logs", rel)
    return [ev.graph for ev in read_events(detect_format(path), path) if isinstance(ev, ReadGraph)]


def _samples(graphs: list[Any], tok: Any, renderer: Renderer | None) -> list[tuple[Any, ...]]:
    out = []
    for g in graphs:
        res = linearize_graph(g, tok, renderer=renderer)
        for s in res.samples:
            out.append((s.sample_id, s.input_ids.tobytes(), s.loss_mask.tobytes(), s.cut_reason, tuple(s.turn_spans)))
        out.append(tuple(sorted((t.node_id, t.status, t.reason or "") for t in res.turns)))
    return out


def _uncached(tok: Any) -> Renderer:
    """A renderer that encodes every rendering whole: no segment cache of any lifetime."""
    renderer = Renderer(tok)
    renderer.segments = None
    return renderer


@pytest.mark.parametrize("template", ["qwen3", "qwen2.5"])
def test_the_run_wide_segment_cache_and_untraced_short_contexts_change_nothing(template: str) -> None:
    tok = load_named_tokenizer(template)
    graphs = [g for rel in REAL for g in _graphs(rel)]
    # Reference: every rendering encoded whole (no segment cache at all), every context traced.
    reference = []
    for g in graphs:
        alone = _uncached(tok)
        alone.min_traced = 0
        alone.trace_verdict = None
        reference.extend(_samples([g], tok, alone))
    tok.segment_cache.clear()
    hits = tok.segment_cache.hits
    assert _samples(graphs, tok, Renderer(tok)) == reference
    assert tok.segment_cache.hits > hits  # the tau-bench conversations share their system prompt and tools


@pytest.mark.parametrize("template", ["qwen3", "qwen2.5"])
def test_encoder_work_follows_distinct_text_not_files(template: str) -> None:
    """Two files holding the same conversations (``convert`` makes one renderer per file): the second encodes
    nothing, because the segment cache belongs to the tokenizer, not to a file's renderer."""
    tok = load_named_tokenizer(template)
    graphs = _graphs(REAL[0])[:6]
    tok.segment_cache.clear()
    first_file = _samples(graphs, tok, Renderer(tok))
    calls, chars, renders = tok.encode_calls, tok.encoded_chars, tok.renders
    memo = render_cache(tok)
    hits = memo.hits
    assert _samples(graphs, tok, Renderer(tok)) == first_file
    assert (tok.encode_calls - calls, tok.encoded_chars - chars) == (0, 0)
    assert tok.segment_cache.evicted == 0 and tok.segment_cache.stored_chars > 0
    # Their renderings too: the node ids are content hashes, so the run-wide memo of renderings serves them; and the
    # encodings of those texts come whole from the memo of encodings, read-only (every turn that gets one shares it).
    assert all(g.content_ids for g in graphs)
    assert memo.hits - hits >= 2 * sum(len(s.turn_ids) for s in linearize_graph(graphs[0], tok).samples)
    if not VERIFY_REPLAY:  # (the test suite renders every hit again, to compare)
        assert tok.renders == renders
    assert len(tok.encodings) > 0 and tok.encodings.hits > 0
    enc = next(iter(tok.encodings._items.values()))
    with pytest.raises(ValueError, match="read-only"):
        enc.ids[0] = 0


def test_graphs_loaded_with_their_logged_ids_never_share_renderings(tmp_path: Path) -> None:
    """A native graph log keeps the ids it holds, which nothing ties to the content: two logs may give the same id
    to different messages. Their renderings are never shared, so each converts as it would alone."""
    from msgtrain.model.graphlog import load_graphs

    source = Path(__file__).resolve().parents[1] / "sample_logs" / "native" / "edit_and_compaction.graph.jsonl"
    text = source.read_text(encoding="utf-8")
    other = tmp_path / "other.graph.jsonl"
    other.write_text(text.replace("What's the weather in Paris?", "What's the weather in Lyon?"), encoding="utf-8")
    tok = load_named_tokenizer("qwen2.5")
    first, second = list(load_graphs(source)), list(load_graphs(other))
    assert [g.graph_id for g in first] == [g.graph_id for g in second]
    assert not any(g.content_ids for g in [*first, *second])
    reference = _samples(second, tok, _uncached(tok))
    assert _samples(first, tok, Renderer(tok)) != reference
    assert _samples(second, tok, Renderer(tok)) == reference


def test_the_rendering_memo_stays_within_its_byte_budget() -> None:
    from msgtrain.linearize.render import RenderCache

    cache = RenderCache(max_bytes=1 << 30)
    cache.put(("k", 0), "text 00")
    entry = cache.bytes
    cache = RenderCache(max_bytes=20 * entry)
    for i in range(50):
        cache.put(("k", i), f"text {i:02d}")
        assert cache.bytes <= cache.max_bytes
    assert len(cache) == 20
    assert cache.get(("k", 29)) is None and cache.get(("k", 30)) == "text 30"


# Pieces of text a random conversation is made of: plain words, whitespace runs, non-ASCII text, and text that
# looks like control tokens (typed by users, returned by tools) or the start of one.
_PIECES = (
    "hello",
    " world",
    "\n",
    "  ",
    "\t",
    "Ünïcødé",
    "数据",
    "🙂",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "<|",
    "|>",
    '{"a": 1}',
    " 42",
    "\n\n",
    "<|start|>",
    "<|end|>",
    "<|endoftext|>",
    "x" * 40,
)


def _random_text(rng: random.Random) -> str:
    return "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 12)))


def _random_conversation(rng: random.Random) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": rng.choice(["You are helpful.", _random_text(rng)])})
    for _ in range(rng.randint(1, 4)):
        messages.append({"role": "user", "content": _random_text(rng)})
        messages.append({"role": "assistant", "content": _random_text(rng)})
    return messages


@pytest.mark.parametrize("template", ["qwen3", "qwen2.5", "gpt-oss", "smollm3", "phi3"])
def test_cached_segment_ids_equal_whole_text_ids_on_random_conversations(template: str) -> None:
    """Over seeded random conversations (control-token text in content included), rendered by the template, the
    ids assembled from the run-wide cache (warm: every conversation shares segments with earlier ones) equal the
    ids of the whole text encoded at once, at the start of the input and after a cut."""
    tok = load_named_tokenizer(template)
    rng = random.Random(38)
    cache = SegmentCache()
    hits = 0
    for _ in range(60):
        messages = _random_conversation(rng)
        try:
            text = tok.render(messages, add_generation_prompt=rng.random() < 0.5)
        except Exception:  # a template that rejects the shape (roles it does not take): nothing to compare
            continue
        before = cache.hits
        ids, _ = tok.encode_segments(text, {}, True, cache)
        assert ids.tolist() == tok.encode(text).tolist(), text
        cut = rng.randrange(len(text) + 1)
        starts = [m.end() for m in tok.added_pattern.finditer(text, 0, cut)]
        if starts and tok.boundary_reuse:  # a continuation after a control token, as encode_from cuts it
            rest = text[starts[-1] :]
            ids, _ = tok.encode_segments(rest, {}, False, cache)
            assert np.concatenate([tok.encode(text[: starts[-1]]), ids]).tolist() == tok.encode(text).tolist()
        hits += cache.hits - before
    assert hits > 0 or not tok.boundary_reuse


def test_the_segment_cache_stays_within_its_byte_budget() -> None:
    one = SegmentCache(max_bytes=1 << 30)
    one.put((False, "segment 00"), np.array([0], dtype=np.int32))
    entry = one.bytes  # what one such entry costs: its text, its ids and the overhead
    cache = SegmentCache(max_bytes=40 * entry)
    for i in range(50):
        cache.put((False, f"segment {i:02d}"), np.array([i], dtype=np.int32))
        assert cache.bytes <= cache.max_bytes
    assert len(cache) == 40 and cache.evicted == 10
    assert cache.get((False, "segment 09")) is None  # evicted, least recently used first
    assert cache.get((False, "segment 10")) is not None
    cache.put((False, "segment 50"), np.array([50], dtype=np.int32))
    assert cache.get((False, "segment 10")) is not None  # just used: kept
    assert cache.get((False, "segment 11")) is None  # the least recently used went
    big = "x" * (cache.max_bytes // LARGEST_ENTRY)  # with its ids and overhead, over 1/LARGEST_ENTRY: never kept
    cache.put((False, big), np.zeros(1, dtype=np.int32))
    assert cache.get((False, big)) is None


def test_an_added_token_that_strips_the_whitespace_after_it_turns_segment_reuse_off() -> None:
    """A token with ``rstrip`` takes the whitespace that starts the next segment: a segment encoded on its own would
    keep it. Such a tokenizer encodes every text whole (found from the token's flags, whichever token it is)."""
    from tokenizers import AddedToken

    from msgtrain.linearize.tokenizer import TokenizerBundle, auto_tokenizer

    hf = auto_tokenizer(str(shared_path("tokenizers", "qwen3")))
    hf.add_tokens([AddedToken("<s1>", rstrip=True, normalized=False, special=True)], special_tokens=True)
    tok = TokenizerBundle(hf, "qwen3+rstrip")
    assert not tok.boundary_reuse
    text = "<|im_start|>user\nhi<s1>   there<|im_end|>\n"
    assert tok.encode_segments(text, {}, True, SegmentCache())[0].tolist() == tok.encode(text).tolist()
    assert tok.encode(text).tolist() == hf.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("template", ["qwen3", "phi3", "gpt-oss", "demo"])
def test_direct_decode_equals_transformers_decode(template: str) -> None:
    tok = load_named_tokenizer(template)
    rng = random.Random(7)
    vocab = len(tok.hf)
    special = sorted(tok.special_ids)
    for _ in range(300):
        ids = [rng.randrange(vocab) for _ in range(rng.randint(0, 12))]
        if special and rng.random() < 0.5:
            ids.insert(rng.randint(0, len(ids)), rng.choice(special))
        assert tok.decode(ids) == tok.hf.decode(ids, skip_special_tokens=False)


@pytest.mark.parametrize("template", ["qwen3", "phi3", "gpt-oss"])
def test_one_plain_tokenizer_encodes_initial_text_as_one_without_added_tokens(template: str) -> None:
    """The plain tokenizer shares the backend's model instead of copying it: it must be, to its serialization, the
    tokenizer the backend's JSON describes with the sentinel as its only added token, and text without the sentinel
    must encode as with no added token at all."""
    from tokenizers import Tokenizer

    tok = load_named_tokenizer(template)
    sentinel = "\ue0030\ue003"
    plain = tok._plain_tokenizer(sentinel)
    spec = json.loads(tok.backend.to_str())
    sentinel_spec = {
        "content": sentinel,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": True,
    }
    got = json.loads(plain.to_str())
    assert [{k: v for k, v in t.items() if k != "id"} for t in got.pop("added_tokens")] == [sentinel_spec]
    assert got == {k: v for k, v in spec.items() if k != "added_tokens"}
    spec["added_tokens"] = []
    bare = Tokenizer.from_str(json.dumps(spec))
    texts = [
        "<|im_start|>user\nhi<|im_end|>",
        " leading space <think>x</think> and <tool_call>{}</tool_call>",
        "\ue0031\ue003 holds another sentinel <|im_end|> <|end|> <|start|>",
        "plain text, no control text at all",
    ]
    for text in texts:
        want = bare.encode(text, add_special_tokens=False).ids
        assert tok.encode_plain(text, initial=True).tolist() == want, text
        after = plain.encode(sentinel + text, add_special_tokens=False).ids
        assert tok.encode_plain(text, initial=False).tolist() == after[1:], text


def test_the_render_watchdog_stops_a_looping_template_and_leaves_no_timer_behind(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The time bound is a periodic watchdog installed once per conversation: a template that never ends is stopped
    (``template_timeout``) within the bound plus a tick, the renderings before and after it are unaffected, and no
    timer or handler is left once the conversation is done."""
    import signal
    import time

    from msgtrain.errors import RenderError
    from msgtrain.linearize import load_tokenizer
    from msgtrain.linearize import render as render_mod
    from msgtrain.model.graph import MessageGraph

    monkeypatch.setattr(render_mod, "MAX_RENDER_SECONDS", 0.4)
    looping = tmp_path / "loop.jinja"
    looping.write_text(
        "{% for m in messages %}{{ m.content }}{% endfor %}"
        "{% if messages[-1].content == 'loop forever' %}"
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}{% endif %}"
    )
    tok = load_tokenizer(None, str(looping))
    g = MessageGraph()
    g.extend([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    renderer = Renderer(tok)
    nodes = g.path(g.head[-1])
    before = signal.getsignal(signal.SIGALRM)
    with render_mod.alarm_handler():
        for _ in range(3):  # short renderings, longer together than the bound: none is stopped
            assert renderer.render(nodes, g.env_of(nodes[-1].id), add_generation_prompt=False) == "ab"
            time.sleep(0.2)
        long = MessageGraph()
        long.extend([{"role": "user", "content": "x"}, {"role": "user", "content": "loop forever"}])
        lnodes = long.path(long.head[-1])
        t = time.monotonic()
        with pytest.raises(RenderError) as e:
            renderer.render(lnodes, long.env_of(lnodes[-1].id), add_generation_prompt=True)
        assert e.value.code == "template_timeout"
        assert 0.4 <= time.monotonic() - t < 0.4 + 0.4 / 8 + 0.5
        assert renderer.render(nodes, g.env_of(nodes[-1].id), add_generation_prompt=False) == "ab"
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is before


@pytest.mark.parametrize("template", ["qwen3", "qwen2.5", "gpt-oss"])
def test_dict_lookups_are_compiled_inline_with_the_sandbox_answers(template: str, monkeypatch: Any) -> None:
    """``message.role`` / ``message['content']`` on a plain dict holding the key are read inline by the compiled
    template (no sandbox call per lookup); the text is transformers' own, and the sandbox still answers the rest."""
    from msgtrain.linearize.template import compile_chat_template

    tok = load_named_tokenizer(template)
    env = compile_chat_template(tok.chat_template).environment
    looked_up: list[tuple[str, str]] = []
    sandbox_getattr, sandbox_getitem = env.getattr, env.getitem

    def getattr_(obj: Any, name: str) -> Any:
        looked_up.append((type(obj).__name__, name))
        return sandbox_getattr(obj, name)

    def getitem_(obj: Any, key: Any) -> Any:
        if isinstance(key, str):
            looked_up.append((type(obj).__name__, key))
        return sandbox_getitem(obj, key)

    monkeypatch.setattr(env, "getattr", getattr_)
    monkeypatch.setattr(env, "getitem", getitem_)
    rng = random.Random(5)
    messages = [m for _ in range(3) for m in _random_conversation(rng)]
    messages = [m for m in messages if m["role"] != "system"]
    text = tok.render(messages, add_generation_prompt=True)
    assert text == tok.hf.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    held = {k for m in messages for k in m}
    assert not [(t, k) for t, k in looked_up if t == "dict" and k in held]  # every such lookup was inline
    assert looked_up  # the rest (loop variables, absent keys, methods) still asks the sandbox


def test_a_template_that_replays_little_is_rendered_untraced_and_the_output_is_the_same() -> None:
    # Qwen3's pass over the whole list before its loop changes the loop's starting state at every user message, so
    # its traced renderings of tau-bench replay about a third of their iterations: tracing costs more than it saves
    # (msgtrain.linearize.render.TraceVerdict). The samples equal those of every long context traced.
    tok = load_named_tokenizer("qwen3")
    graphs = [g for rel in REAL for g in _graphs(rel)]
    tok.clear_run_memos()
    every = Renderer(tok)
    every.trace_verdict = None
    reference = _samples(graphs, tok, every)
    tok.clear_run_memos()
    judged = Renderer(tok)
    judged.trace_verdict = TraceVerdict()
    assert _samples(graphs, tok, judged) == reference
    assert judged.trace_verdict.verdicts >= 1
    assert judged.traced_renders < every.traced_renders // 2
    assert judged.iterations_run > every.iterations_run


def test_a_template_that_replays_most_iterations_stays_traced() -> None:
    from benchmarks import corpus as gen

    tok = load_named_tokenizer("qwen2.5")
    conv = gen.make_conversation(gen.synthetic_pool(), 128, seed=128, reasoning=False, session="verdict")
    tok.clear_run_memos()
    renderer = Renderer(tok)
    renderer.trace_verdict = TraceVerdict()
    res = linearize_graph(gen.conversation_graph(conv, model="policy"), tok, renderer=renderer)
    assert not res.drops
    assert renderer.traced_renders >= TRACE_PROBE  # enough for a verdict
    assert renderer.trace_verdict.verdicts == 0
    assert renderer.iterations_replayed > 0.9 * renderer.iterations_run


def test_trace_verdict_pauses_after_a_probe_that_replayed_little_then_probes_again() -> None:
    v = TraceVerdict()
    for _ in range(TRACE_PROBE):
        assert v.trace_next()
        v.record(replayed=5, run=5)
    assert REPLAY_PAYS > 0.5  # half the iterations replayed: below the bar
    assert v.verdicts == 1
    assert not any(v.trace_next() for _ in range(TRACE_PAUSE * TRACE_PROBE))
    for _ in range(TRACE_PROBE):
        assert v.trace_next()
        v.record(replayed=9, run=1)
    assert v.verdicts == 1 and v.trace_next()
