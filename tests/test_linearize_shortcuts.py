"""The linearizer's shortcuts change no output: each is checked against the path it replaces.

- segment ids shared between the conversations of a file (``SharedSegments``) against one cache per conversation;
- short contexts rendered untraced (``Renderer.min_traced``) against every context traced;
- the backend's own decode against transformers' ``decode``;
- one plain-text tokenizer (a sentinel as its only added token) for text at the start of the input too, against a
  copy with no added token at all.
"""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.registry import REGISTRY  # noqa: F401 - fills the registry
from msgtrain.linearize import linearize_graph
from msgtrain.linearize.render import Renderer
from msgtrain.linearize.tokenizer import SharedSegments
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


@pytest.mark.parametrize("template", ["qwen3", "qwen2.5"])
def test_shared_segments_and_untraced_short_contexts_change_nothing(template: str) -> None:
    tok = load_named_tokenizer(template)
    graphs = [g for rel in REAL for g in _graphs(rel)]
    # Reference: a fresh renderer per conversation (no sharing between conversations), every context traced.
    reference = []
    for g in graphs:
        alone = Renderer(tok)
        alone.min_traced = 0
        reference.extend(_samples([g], tok, alone))
    shared = Renderer(tok)  # one renderer for all of them, as convert uses one per file
    encoded = tok.encoded_tokens
    assert _samples(graphs, tok, shared) == reference
    assert shared.segments.hits > 0  # the tau-bench conversations share their system prompt and tools
    # Shared segments are not encoded again: the second pass over the same conversations encodes almost nothing.
    first = tok.encoded_tokens - encoded
    assert _samples(graphs, tok, shared) == reference
    assert tok.encoded_tokens - encoded - first < 0.05 * first


def test_shared_segments_stay_within_their_bound() -> None:
    cache = SharedSegments(max_chars=100)
    for i in range(50):
        cache.put((False, f"segment {i:02d}"), np.array([i], dtype=np.int32))  # 10 characters each
    assert cache.get((False, "segment 00")) is None  # evicted, least recently used first
    assert cache.get((False, "segment 49")) is not None
    assert sum(len(k[1]) for k in cache._ids) <= 100
    cache.put((False, "x" * 26), np.zeros(1, dtype=np.int32))  # over a quarter of the bound: never kept
    assert cache.get((False, "x" * 26)) is None


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
