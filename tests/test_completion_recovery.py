"""The completion recovery rule (msgtrain/linearize/completion.py) on the shapes the real-vocabulary oracle found:
renderings that part inside a control token's text, and a template that renders the generation prompt even
without ``add_generation_prompt`` (Command R7B's tool-use template, checked on its real vocabulary by
tests/test_linearize_oracle_gguf.py)."""

from __future__ import annotations

import re
from pathlib import Path

from msgtrain import MessageGraph
from msgtrain.linearize import linearize_graph, load_tokenizer
from msgtrain.linearize.completion import completion_span

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
