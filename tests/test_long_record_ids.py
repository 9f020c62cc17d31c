"""A long record's ids and text held fewer times while linearizing, with the same ids: a long segment is keyed in the
segment caches by a digest of its text (no copy of it as a key), a long prompt's ids become the first ids of its
joint encoding (one array, not two), and a long text's pieces are encoded into one array grown in place. The oracle
is the tokenizer's own encoding of the whole text (``backend.encode``) and the chat template's own rendering."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

from msgtrain import MessageGraph
from msgtrain.linearize import linearize_graph, load_tokenizer
from msgtrain.linearize.plan import _GraphLinearizer
from msgtrain.linearize.tokenizer import _DIGEST_CHARS, LARGEST_ENTRY, REBIND_BYTES, SegmentCache, segment_key


@pytest.fixture(scope="module")
def demo() -> Any:
    return load_tokenizer(None, None)


def _prose(n: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    words = ["the", "quick", "brown", "fox", "naïve", "日本語", "it's", "42", "\n", "-", "(x)"]
    out = " ".join(rng.choice(words, size=n // 4))
    return out[:n]


def _whole(tok: Any, text: str) -> list[int]:
    return list(tok.backend.encode(text, add_special_tokens=False).ids)


def test_a_long_segment_is_keyed_by_a_digest_and_still_gives_the_whole_texts_ids(demo: Any) -> None:
    body = _prose(3 * _DIGEST_CHARS, 1)
    text = f"<|im_start|>user\n{body}<|im_end|>\n<|im_start|>assistant\n"
    cache: dict[Any, np.ndarray] = {}
    shared = SegmentCache()
    ids, _ = demo.encode_segments(text, cache, True, shared)
    assert ids.tolist() == _whole(demo, text)
    long_keys = [k for k in cache if isinstance(k[1], bytes)]
    assert len(long_keys) == 1 and len(long_keys[0][1]) == 32
    assert all(len(k[1]) < _DIGEST_CHARS for k in cache if isinstance(k[1], str))
    assert shared.stored_chars == sum(len(k[1]) for k in cache if isinstance(k[1], str)) + len(body) + len("<|im_end|>")
    # The same text again: every segment from the cache, no encoding.
    calls = demo.encode_calls
    again, _ = demo.encode_segments(text, cache, True, shared)
    assert demo.encode_calls == calls and again.tolist() == ids.tolist()
    # A text of the same length that differs in one character near its end is another key, with its own ids.
    other_body = body[:-5] + ("Z" if body[-5] != "Z" else "Y") + body[-4:]
    other = text.replace(body, other_body)
    other_ids, _ = demo.encode_segments(other, cache, True, shared)
    assert other_ids.tolist() == _whole(demo, other) != ids.tolist()
    assert demo.encode_calls == calls + 1


def test_segment_keys_of_long_texts_are_one_to_one_and_apart_from_text_keys() -> None:
    a = "x" * _DIGEST_CHARS
    assert segment_key(True, a, 0, _DIGEST_CHARS - 1) == (True, a[:-1])  # short: the text itself
    assert segment_key(True, a, 0, len(a)) == segment_key(True, "y" + a, 1, len(a) + 1)  # where it sits: no matter
    assert segment_key(True, a, 0, len(a)) != segment_key(False, a, 0, len(a))
    assert segment_key(True, a + "x", 0, len(a) + 1) != segment_key(True, a, 0, len(a))
    # cut into blocks at any character: surrogates and multi-byte characters give the digest of the whole
    b = ("é\ud800日" * (_DIGEST_CHARS // 2))[: 2 * _DIGEST_CHARS + 1]
    assert segment_key(False, b, 0, len(b)) != segment_key(False, b[:-1] + "x", 0, len(b))


@pytest.mark.parametrize("memo_bytes", [1 << 20, 128 << 20])
def test_a_long_prompt_is_held_as_the_first_ids_of_its_joint_encoding(
    demo: Any, monkeypatch: pytest.MonkeyPatch, memo_bytes: int
) -> None:
    """Past the memo of encodings' bound (1 MiB: an entry over 64 KiB is not kept, as a 10 MB record is not at the
    run's 128 MiB) the prompt's encoding is rebound to the joint's first ids; one the memo holds is left as it is.
    The ids are the template's either way."""
    body = _prose(400_000, 2)
    demo.clear_run_memos()
    monkeypatch.setattr(demo.encodings, "max_bytes", memo_bytes)
    seen: list[tuple[bool, np.ndarray, Any]] = []
    original = _GraphLinearizer._prompt_in_joint

    def spy(self: _GraphLinearizer, prompt_enc: Any, prompt: np.ndarray, joint: np.ndarray) -> bool:
        done = original(self, prompt_enc, prompt, joint)
        seen.append((done, joint, prompt_enc))
        return done

    monkeypatch.setattr(_GraphLinearizer, "_prompt_in_joint", spy)
    g = MessageGraph()
    g.append({"role": "user", "content": body})
    g.append({"role": "assistant", "content": "a short reply"})
    g.append({"role": "user", "content": "and once more"})
    g.append({"role": "assistant", "content": "done"})
    (sample,) = linearize_graph(g, demo).samples
    messages = [
        {"role": m, "content": c}
        for m, c in zip(["user", "assistant"] * 2, [body, "a short reply", "and once more", "done"], strict=True)
    ]
    rendered = demo.hf.apply_chat_template(messages, tokenize=False)
    assert rendered.endswith("<|im_end|>\n")  # the sample ends at the last reply's end-of-turn token
    assert sample.input_ids.tolist() == _whole(demo, rendered[:-1])
    first_prompt = demo.hf.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    n = len(_whole(demo, first_prompt))
    assert n * 4 > REBIND_BYTES and n > 4 * (1 << 16)  # long, past any block of ids compared at a time
    assert sample.loss_mask[:n].sum() == 0 and sample.loss_mask[n] == 1
    done, joint, prompt_enc = seen[0]
    assert prompt_enc.ids.shape[0] == n and prompt_enc.ids.tolist() == _whole(demo, first_prompt)
    if memo_bytes < 128 << 20:
        assert done and np.shares_memory(prompt_enc.ids, joint)
        assert prompt_enc.ids.base is joint or prompt_enc.ids.base is joint.base
    else:
        assert demo.encodings.holds(prompt_enc) and not done
    demo.clear_run_memos()


def test_an_encoding_extends_a_long_base_in_the_room_after_it_and_only_one_encoding_does(demo: Any) -> None:
    """The joint rendering after a long prompt writes its new ids after the prompt's in one buffer; a second
    rendering from the same prompt (another branch), or one whose text after the last control token differs from
    the prompt's, gets an array of its own; every encoding keeps the ids of its whole text."""
    body = _prose(400_000, 3)
    prompt = f"<|im_start|>user\n{body}<|im_end|>\n<|im_start|>assistant\n"
    cache: dict[Any, np.ndarray] = {}
    base = demo.encode_full(prompt, False, cache, SegmentCache())
    assert base.ids.tolist() == _whole(demo, prompt)
    one = prompt + "the first reply<|im_end|>\n"
    two = prompt + "another reply<|im_end|>\n"
    other = prompt[: -len("assistant\n")] + "user\nnot this<|im_end|>\n"
    first = demo.encode_from(base, one, segments=cache)
    assert first.ids.tolist() == _whole(demo, one) and np.shares_memory(first.ids, base.ids)
    second = demo.encode_from(base, two, segments=cache)
    assert second.ids.tolist() == _whole(demo, two) and not np.shares_memory(second.ids, base.ids)
    assert first.ids.tolist() == _whole(demo, one) and base.ids.tolist() == _whole(demo, prompt)  # not overwritten
    third = demo.encode_from(first, one + "<|im_start|>user\nmore<|im_end|>\n", segments=cache)
    assert third.ids.tolist() == _whole(demo, one + "<|im_start|>user\nmore<|im_end|>\n")
    assert np.shares_memory(third.ids, base.ids)  # the next turn extends the first reply's encoding
    cache2: dict[Any, np.ndarray] = {}
    fresh = demo.encode_full(prompt, False, cache2, SegmentCache())
    drifted = demo.encode_from(fresh, other, segments=cache2)
    assert drifted.ids.tolist() == _whole(demo, other) and not np.shares_memory(drifted.ids, fresh.ids)
    assert fresh.ids.tolist() == _whole(demo, prompt)


def test_the_run_wide_cache_keeps_a_long_segment_as_its_encodings_view_charged_the_encoding(demo: Any) -> None:
    """A long message's ids are held once: the run-wide segment cache keeps the view of the prompt's ids its
    conversation keeps (it kept the encoder's own array beside them for the rest of the run), charged the whole
    buffer that view keeps alive, so that one over the cache's bound per entry is not kept at all."""
    body = _prose(300_000, 4)
    text = f"<|im_start|>user\n{body}<|im_end|>\n<|im_start|>assistant\n"
    shared = SegmentCache()
    ids, _ = demo.encode_segments(text, {}, True, shared)
    assert ids.tolist() == _whole(demo, text)
    (key,) = [k for k in shared._ids if isinstance(k[1], bytes)]
    kept = shared.get(key)
    assert kept is not None and kept.nbytes >= REBIND_BYTES and np.shares_memory(kept, ids)
    held = ids.base.nbytes
    assert held > kept.nbytes and shared.bytes >= held
    # A bound per entry between the segment's own ids and the buffer they are a view of: not kept.
    small = SegmentCache(max_bytes=LARGEST_ENTRY * (kept.nbytes + held) // 2)
    again, _ = demo.encode_segments(text, {}, True, small)
    assert again.tolist() == ids.tolist() and key not in small._ids


def test_a_long_message_just_encoded_becomes_its_prompts_buffer_and_its_ids_are_held_once(demo: Any) -> None:
    """A prompt of a few short segments and one long message: the message's ids, as the encoder grew them, are grown
    in place into the prompt's buffer (moved up past the system prompt's ids) instead of copied into a new one, so
    encoding the prompt holds its ids about once. Measured with tracemalloc: 1.6 times the prompt's ids (the rest is
    the message's text as its own string and the encoder's pieces); 2.4 when they were copied."""
    import tracemalloc

    body = _prose(300_000, 5)
    text = f"<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\n{body}<|im_end|>\n<|im_start|>assistant\n"
    cache: dict[Any, np.ndarray] = {}
    demo.encode_segments("<|im_start|>system\nwarm up<|im_end|>\n", {}, True, SegmentCache())
    tracemalloc.start()
    try:
        prompt = demo.encode_full(text, False, cache, SegmentCache())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    ids = prompt.ids
    assert ids.tolist() == _whole(demo, text)
    (key,) = [k for k in cache if isinstance(k[1], bytes)]
    assert cache[key].base is ids.base and np.shares_memory(cache[key], ids)  # the message: a view of the prompt
    assert peak < 2 * ids.nbytes, peak / ids.nbytes
    # The room after the prompt's ids is its buffer's: the joint rendering extends it in place.
    joint = demo.encode_from(prompt, text + "ok<|im_end|>\n", segments=cache)
    assert joint.ids.tolist() == _whole(demo, text + "ok<|im_end|>\n") and np.shares_memory(joint.ids, ids)
    assert ids.tolist() == _whole(demo, text)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/statm")
def test_a_long_array_grows_in_place_keeping_its_ids_and_leaving_its_room_unresident() -> None:
    from msgtrain.linearize.pieces import grow_unwritten
    from msgtrain.run.allocators import MMAP_THRESHOLD, tune_allocators

    tune_allocators()  # the command line's settings (a fixed mmap threshold), which a run of the suite may not have set

    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    a = np.arange(4 << 20, dtype=np.int32)  # 16 MiB: its own mapping (over glibc's default threshold and ours)
    assert a.nbytes > 8 * MMAP_THRESHOLD
    before = rss()
    grow_unwritten(a, 8 << 20)
    # measured before anything else allocates (the comparison's temporaries may stay on the heap once glibc's
    # dynamic mmap threshold has risen, as it does in a process that has not set it)
    grown = rss() - before
    assert a.shape == (8 << 20,) and a.flags.writeable and a.flags.owndata
    assert np.array_equal(a[: 4 << 20], np.arange(4 << 20, dtype=np.int32))
    assert grown < 4 << 20  # the 16 MiB of room not written (numpy zeroes it in a writeable array)
