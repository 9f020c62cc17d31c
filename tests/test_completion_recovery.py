"""The completion recovery rule (msgtrain/linearize/completion.py) on the shapes the real-vocabulary oracle found:
renderings that part inside a control token's text, and a template that renders the generation prompt even
without ``add_generation_prompt`` (Command R7B's tool-use template, checked on its real vocabulary by
tests/test_linearize_oracle_gguf.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from msgtrain import MessageGraph
from msgtrain.linearize import linearize_graph, load_tokenizer
from msgtrain.linearize.completion import completion_span, with_probe_text

CONTROLS = re.compile(r"<\|START_THINKING\|>|<\|START_RESPONSE\|>|<\|END_THINKING\|>|<\|END\|>|<\|BOT\|>")


def test_renderings_that_part_inside_a_control_tokens_text_part_at_its_start() -> None:
    # Command R7B's shape: the generation prompt (always rendered) ends with an empty thinking block; the message
    # renders <|START_RESPONSE|> where the context renders <|START_THINKING|>: both begin with "<|START_".
    header = "<|BOT|><|START_THINKING|><|END_THINKING|>"
    ctx = "user: hi" + header
    turn = "user: hi<|BOT|><|START_RESPONSE|>hello<|END|>" + header
    start, end = completion_span(ctx, turn, lambda: ctx, None, CONTROLS)
    assert turn[start:end] == "<|START_RESPONSE|>hello<|END|><|BOT|>"
    # Without the control tokens' text known, the rule cuts where the characters part (what it did before).
    start, _ = completion_span(ctx, turn, lambda: ctx, None)
    assert turn[start:].startswith("RESPONSE|>")


ALWAYS_PROMPTS = (
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
    "{{ '<|im_start|>assistant\\n' }}"
)


def test_a_template_that_always_renders_the_generation_prompt_trains_the_turn_up_to_its_stop(tmp_path: Path) -> None:
    template = tmp_path / "always.jinja"
    template.write_text(ALWAYS_PROMPTS, encoding="utf-8")
    tok = load_tokenizer(None, str(template))
    g = MessageGraph(graph_id="always")
    g.append({"role": "user", "content": "hi"})
    g.append({"role": "assistant", "content": "hello"})
    g.append({"role": "user", "content": "and?"})
    g.append({"role": "assistant", "content": "more"})
    res = linearize_graph(g, tok)
    completions = [tok.decode(s.input_ids[a:b].tolist()) for s in res.samples for a, b in s.turn_spans]
    assert completions == ["hello<|im_end|>", "more<|im_end|>"]


def test_a_message_that_ends_like_the_one_before_it_is_recovered_whole() -> None:
    """Qwen3's shape: the last assistant message renders an empty thinking block, an earlier one does not, so a
    second adjacent assistant message is recovered from the difference. Both end "… Please provide me the": the
    tail the context and the turn share reaches into the message's text, and is bounded by what the template writes
    after the text (the same turn rendered with a probe text)."""
    first, second = "Sure. Please provide me the", "I need your dates. Please provide me the"
    head = "<u>book</u><a>"
    ctx = head + "<t></t>" + first + "<e>"
    prompt = ctx + "<a>"
    turn = head + first + "<e><a><t></t>" + second + "<e>"
    probe = with_probe_text({"role": "assistant", "content": second})
    assert probe is not None and not probe["content"].endswith("e")
    probed = head + first + "<e><a><t></t>" + probe["content"] + "<e>"
    start, end = completion_span(prompt, turn, lambda: ctx, None, None, None, None, lambda: probed)
    assert turn[start:end] == "<t></t>" + second
    # Without the bound, the shared words are lost (what the rule did before).
    start, end = completion_span(prompt, turn, lambda: ctx, None, None)
    assert turn[start:end] == "<t></t>I need your dates"


def test_two_adjacent_assistant_messages_are_two_whole_turns_on_qwen3() -> None:
    from tests.conftest import load_named_tokenizer

    tok = load_named_tokenizer("qwen3")
    g = MessageGraph(graph_id="adjacent")
    g.append({"role": "user", "content": "Book me a flight."})
    g.append({"role": "assistant", "content": "Sure, I can help. Please provide me the"})
    g.append({"role": "assistant", "content": "I need your dates. Please provide me the"})
    res = linearize_graph(g, tok)
    completions = [tok.decode(s.input_ids[a:b].tolist()) for s in res.samples for a, b in s.turn_spans]
    assert [c.split("</think>\n\n")[-1] for c in completions] == [
        "Sure, I can help. Please provide me the<|im_end|>",
        "I need your dates. Please provide me the<|im_end|>",
    ]
    assert not res.flags and not res.drops


@pytest.mark.parametrize(
    ("family", "reply", "usage", "flagged"),
    [
        # The server's reasoning parser cut "<think>…</think>" out and left the blank line after it.
        ("qwen3", "\n\n<guess>42</guess>", None, True),
        # The API counted reasoning tokens the log does not hold.
        ("qwen3", "<guess>42</guess>", {"completion_tokens_details": {"reasoning_tokens": 57}}, True),
        ("qwen3", "<guess>42</guess>", None, False),  # nothing says reasoning was sampled
        ("qwen2.5", "\n\n<guess>42</guess>", None, False),  # the template has no place for reasoning
    ],
)
def test_a_thinking_models_reply_logged_without_its_reasoning_is_flagged_reasoning_not_logged(
    family: str, reply: str, usage: dict[str, Any] | None, flagged: bool
) -> None:
    """Qwen3 renders a reply without reasoning with an empty ``<think></think>`` block, where the model sampled its
    reasoning: when the log shows there was some (the blank line a reasoning parser leaves, reasoning tokens in
    the usage), the turn says so."""
    from msgtrain.linearize.completion import REASONING_NOT_LOGGED
    from tests.conftest import load_named_tokenizer

    tok = load_named_tokenizer(family)
    g = MessageGraph(graph_id="stripped")
    g.append({"role": "user", "content": "Guess a number."})
    nid = g.append({"role": "assistant", "content": reply})
    if usage is not None:  # as a reader records the call's usage beside the reply
        g.nodes[nid].message.metadata["usage"] = usage
    res = linearize_graph(g, tok)
    assert not res.drops and len(res.samples) == 1
    assert (REASONING_NOT_LOGGED in res.samples[0].flags) == flagged
