"""Content formats as a serving engine detects them (msgtrain.linearize.content_format): a template that loops over
a message's content gets the parts as logged ("openai"), any other gets list content as its text parts joined with a
newline ("string", as vLLM's ``--chat-template-content-format auto`` does), so a template that concatenates
``message.content`` renders logs whose content is a list of parts instead of failing."""

from __future__ import annotations

from pathlib import Path

import pytest

from msgtrain.ingest.boundary import open_reader, read_events
from msgtrain.ingest.core.events import ReadGraph
from msgtrain.linearize import LinearizeOptions, linearize_graph
from msgtrain.linearize.content_format import detect_content_format, joined_text, resolve_content_format
from msgtrain.linearize.render import Renderer
from msgtrain.linearize.turns import collect_turns
from msgtrain.model.graph import MessageGraph
from msgtrain.model.message import MediaPart, TextPart
from tests.conftest import load_named_tokenizer, shared_path

LOOPS = [
    "{% for m in messages %}{% for part in m['content'] %}{{ part.text }}{% endfor %}{% endfor %}",
    "{% for m in messages %}{% for part in m.content | list %}{{ part['text'] }}{% endfor %}{% endfor %}",
    # Through a variable assigned from ``messages`` (a system message split off) and a slice.
    "{% set loop_messages = messages[1:] %}{% for message in loop_messages %}"
    "{% for c in message.content[0:] %}{{ c.text }}{% endfor %}{% endfor %}",
]
STRINGS = [
    "{% for message in messages %}{{ '<|im_start|>' + message.role + '\\n' + message.content }}{% endfor %}",
    # Reading a part by index is not looping: vLLM's detection says "string", so does msgtrain's.
    "{% for message in messages %}{{ message.content[0]['text'] }}{% endfor %}",
    # A loop over something else that happens to be called content.
    "{% for content in documents %}{{ content }}{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}",
    "{% for m in messages %}{{ m.content }",  # unparsable: the default
]


@pytest.mark.parametrize("template", LOOPS)
def test_a_template_that_loops_over_a_message_content_reads_parts(template: str) -> None:
    assert detect_content_format(template) == "openai"


@pytest.mark.parametrize("template", STRINGS)
def test_any_other_template_reads_content_as_one_string(template: str) -> None:
    assert detect_content_format(template) == "string"


def test_the_given_format_overrides_detection_and_text_parts_join_with_a_newline() -> None:
    assert resolve_content_format("openai", STRINGS[0]) == "openai"
    assert resolve_content_format("string", LOOPS[0]) == "string"
    assert resolve_content_format("auto", LOOPS[0]) == "openai"
    parts = [
        {"type": "text", "text": "a"},
        {"type": "image_url", "image_url": {"url": "x"}},
        {"type": "text", "text": "b\n"},
        {"type": "text", "text": ""},
    ]
    assert joined_text(parts) == "a\nb\n\n"  # vLLM: "\n".join of the text parts, empty ones included


def _codex_graphs_with_parts() -> list[MessageGraph]:
    folder = shared_path("real_logs", "codex_localpush_redacted")
    graphs = []
    for path in sorted(folder.glob("rollout-*.jsonl")):
        reader = open_reader(path)
        for ev in read_events(reader, path):  # type: ignore[arg-type]
            if isinstance(ev, ReadGraph):
                graphs.append(ev.graph)
    return graphs


def test_codex_logs_with_list_content_render_with_qwen25s_string_template_as_vllm_joins_them() -> None:
    qwen25, qwen3 = load_named_tokenizer("qwen2.5"), load_named_tokenizer("qwen3")
    graphs = _codex_graphs_with_parts()
    trained: dict[str, int] = {}
    checked = 0
    for name, tok in (("qwen2.5", qwen25), ("qwen3", qwen3)):
        trained[name] = 0
        for g in graphs:
            res = linearize_graph(g, tok)
            assert "render_error" not in res.drops, name
            trained[name] += sum(1 for t in res.turns if t.status == "trained")
            if name != "qwen2.5":
                continue
            # The rendered prompt holds each list-content message as vLLM's string format gives it.
            r = Renderer(tok)
            for t in collect_turns(g):
                media = [n for n in t.context if any(isinstance(p, MediaPart) for p in getattr(n.message, "parts", ()))]
                if not media:
                    continue
                rendered = r.render(t.context, t.env, add_generation_prompt=True)
                for n in media:
                    texts = "\n".join(p.text for p in n.message.parts if isinstance(p, TextPart))
                    assert r.message_dict(n)["content"] == texts
                    assert f"<|im_start|>{n.message.role}\n{texts}<|im_end|>" in rendered
                    checked += 1
                break
    assert checked > 0
    assert trained["qwen2.5"] == trained["qwen3"] > 0


def test_the_openai_content_format_hands_a_string_template_the_parts_and_it_fails_as_before() -> None:
    qwen25 = load_named_tokenizer("qwen2.5")
    drops = 0
    for g in _codex_graphs_with_parts():
        res = linearize_graph(g, qwen25, options=LinearizeOptions(content_format="openai"))
        drops += res.drops.get("render_error", 0)
    assert drops > 0


def test_convert_records_the_content_format_in_the_report(tmp_path: Path) -> None:
    from msgtrain.cli import main

    out = tmp_path / "out"
    template = shared_path("tokenizers", "qwen2.5-instruct", "tokenizer_config.json")
    turn = shared_path("real_logs", "codex_codemie", "turn-1.jsonl")
    args = ["convert", str(turn), "-o", str(out), "--tokenizer", str(shared_path("tokenizers", "qwen3"))]
    assert main([*args, "--chat-template", str(template), "--quiet"]) in (0, 3)
    import json

    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["tokenizer"]["content_format"] == report["tokenizer"]["content_format_detected"] == "string"
    out2 = tmp_path / "out2"
    args[3] = str(out2)
    assert main([*args, "--chat-template", str(template), "--content-format", "openai", "--quiet"]) in (0, 3)
    report = json.loads((out2 / "report.json").read_text(encoding="utf-8"))
    assert report["tokenizer"]["content_format"] == "openai"
    assert report["tokenizer"]["content_format_detected"] == "string"
