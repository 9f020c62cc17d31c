"""Templates that do not render a sampled turn right after its generation prompt, stop on something other than an
end-of-turn token, or drop what the model sampled (the shaped families of tests/conftest.py; the oracle in
test_linearize_oracle.py checks them on random runs, these tests name each behaviour)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from msgtrain import MessageGraph
from msgtrain.cli import main
from msgtrain.errors import ConfigError
from msgtrain.linearize import LinearizeOptions, linearize_graph, load_tokenizer
from msgtrain.linearize.completion import NotRecoverable, completion_span
from msgtrain.linearize.tokenizer import template_stop_texts
from msgtrain.linearize.tokenizer_source import check_folder
from tests.conftest import load_named_tokenizer
from tests.test_linearize_oracle import _graphs_from_records

CALL = {"id": "call00001", "type": "function", "function": {"name": "search", "arguments": '{"query": "rain"}'}}
TOOLS = [{"type": "function", "function": {"name": "search", "description": "Search", "parameters": {}}}]


def _conversation() -> MessageGraph:
    g = MessageGraph(graph_id="g", tools=TOOLS)
    g.append({"role": "system", "content": "Be brief."})
    g.append({"role": "user", "content": "Weather?"})
    g.append({"role": "assistant", "content": "Let me look.", "tool_calls": [CALL]})
    g.append({"role": "tool", "tool_call_id": "call00001", "name": "search", "content": "rain"})
    g.append({"role": "assistant", "content": "It rains."})
    return g


def _completions(tok: Any, g: MessageGraph) -> list[str]:
    res = linearize_graph(g, tok)
    assert not res.drops, res.turns
    return [tok.decode(s.input_ids[a:b].tolist()) for s in res.samples for a, b in s.turn_spans]


def test_a_turn_that_stops_on_the_next_role_header_trains_that_header() -> None:
    tok = load_named_tokenizer("role-headers")
    completions = _completions(tok, _conversation())
    assert completions[0].endswith("</tool_call><|observation|>")
    assert completions[-1].endswith("It rains.<|user|>")


def test_a_turn_the_template_renders_differently_in_history_is_recovered_from_the_difference() -> None:
    tok = load_named_tokenizer("rerender-tooluse")
    completions = _completions(tok, _conversation())
    assert completions[0].startswith("Let me look.\nAction:") and "<|START_OF_TURN_TOKEN|>" not in completions[0]
    # The template ends a tool-call turn with no token at all: the model stopped on EOS, right after its text.
    assert completions[0].endswith("]```<|END_OF_TURN_TOKEN|>")
    assert completions[-1] == "It rains.<|END_OF_TURN_TOKEN|>"


def test_a_generation_prompt_prefill_that_history_does_not_render_is_not_part_of_the_completion() -> None:
    tok = load_named_tokenizer("prefill-turns")
    completions = _completions(tok, _conversation())
    assert completions[0].startswith("Let me look.<|tool_call>call:search")
    assert completions[0].endswith("<tool_call|><|tool_response>")  # stopped where the tool result begins
    assert completions[-1] == "It rains.<turn|>"  # continued in the model's turn, no generation prompt


def test_a_turn_whose_rendering_lost_its_tool_calls_is_dropped_unless_asked_then_trained_and_flagged() -> None:
    # Trained, the turn would be a bare end token: the model taught to answer a tool-needing request with nothing.
    tok = load_named_tokenizer("drops-calls")
    res = linearize_graph(_conversation(), tok)
    assert res.drops == {"template_dropped_tool_calls": 1} and not res.flags["template_dropped_tool_calls"]
    (dropped,) = [t for t in res.turns if t.status == "dropped"]
    assert "without its tool calls" in (dropped.message or "") and "--train-dropped" in (dropped.message or "")
    res = linearize_graph(_conversation(), tok, options=LinearizeOptions(train_dropped=True))
    assert not res.drops and res.flags["template_dropped_tool_calls"] == 1
    flagged = [s for s in res.samples if "template_dropped_tool_calls" in s.flags]
    assert len(flagged) == 1


def test_the_completion_span_rule_names_why_a_turn_cannot_be_recovered() -> None:
    try:
        completion_span("<s>ctx PROMPT", "<s>other", lambda: "<s>ctx but not a prefix")
    except NotRecoverable as e:
        assert "does not extend the context" in str(e)
    else:
        raise AssertionError("recovered a turn whose generation prompt does not extend its context")
    # A closing instruction Y after every rendering: the message is what the turn inserts before it.
    assert completion_span("abY<h>", "ab<h>msg<e>Y", lambda: "abY") == (len("ab<h>"), len("ab<h>msg<e>"))


@pytest.mark.parametrize(
    ("shape", "prompt", "turn", "shown", "completion", "flagged"),
    [
        # MiniMax-M2 (llama.cpp models/templates/MiniMax-M2.jinja): the prompt opens <think>, a message without
        # reasoning renders no reasoning block at all.
        ("no reasoning block", "c<a>\n<t>\n", "c<a>\nhi<e>", "c<a>\n<t>\nPROBE\n</t>\n\nhi<e>", "hi<e>", True),
        # GLM-4.7 (GLM-4.7-Flash.jinja): a message without reasoning renders an empty one, "</t>" then the text.
        ("an empty reasoning block", "c<a><t>", "c<a></t>hi<e>", "c<a><t>PROBE</t>hi<e>", "</t>hi<e>", False),
        # Gemma 4: the prompt's prefill is a closed, empty thought channel; reasoning would go inside it.
        ("a closed empty reasoning prefill", "c<a>\n<t><c>", "c<a>\nhi<e>", "c<a>\n<t>PROBE<c>hi<e>", "hi<e>", False),
    ],
)
def test_a_prefill_that_opens_reasoning_the_message_lacks_flags_the_turn_reasoning_not_logged(
    shape: str, prompt: str, turn: str, shown: str, completion: str, flagged: bool
) -> None:
    """The generation prompt ends with a prefill that history writes only before a message's reasoning: the model
    sampled its reasoning there. A message without it whose rendering is not an empty reasoning is trained as
    rendered and flagged: what the model sampled first is not in the log."""
    from msgtrain.linearize.completion import REASONING_NOT_LOGGED, REASONING_PROBE

    shown = shown.replace("PROBE", REASONING_PROBE)
    flags: list[str] = []
    starts = lambda text: [m.start() for m in re.finditer("<", text)]  # noqa: E731
    start, end = completion_span(prompt, turn, lambda: "c", starts, None, lambda: shown, flags)
    assert turn[start:end] == completion, shape
    assert flags == ([REASONING_NOT_LOGGED] if flagged else []), shape


def test_a_message_whose_rendering_starts_with_the_prefills_closing_part_starts_after_it() -> None:
    """DeepSeek V3.2 (llama.cpp models/templates/deepseek-ai-DeepSeek-V3.2.jinja) prompts ``<think></think>`` and
    renders a message without reasoning as ``</think>`` + content: the prompt holds that ``</think>`` already."""
    starts = lambda text: [m.start() for m in re.finditer("<", text)]  # noqa: E731
    prompt, turn = "c<a><t></t>", "c<a></t>hi<e>"
    start, end = completion_span(prompt, turn, lambda: "c", starts)
    assert turn[start:end] == "hi<e>"


RAISES_ON_CONTROL_TEXT = (
    "{% for m in messages %}{% if '<|im_start|>' in (m.content or '') %}"
    "{{ raise_exception('control text in content') }}{% endif %}"
    "{{ '<|im_start|>' + m.role + '\\n' + (m.content or '') + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def test_a_turn_whose_ids_were_logged_never_needs_the_template(tmp_path: Path) -> None:
    template = tmp_path / "strict.jinja"
    template.write_text(RAISES_ON_CONTROL_TEXT, encoding="utf-8")
    tok = load_tokenizer(None, str(template))
    prompt = tok.encode("<|im_start|>user\nsay <|im_start|> please<|im_end|>\n<|im_start|>assistant\n").tolist()
    completion = [*tok.encode("said").tolist(), tok.hf.convert_tokens_to_ids("<|im_end|>")]
    record = {
        "request": {"model": "m", "messages": [{"role": "user", "content": "say <|im_start|> please"}]},
        "response": {
            "id": "r",
            "model": "m",
            "prompt_token_ids": prompt,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "said"},
                    "finish_reason": "stop",
                    "token_ids": completion,
                }
            ],
        },
    }
    (graph,) = _graphs_from_records([record], tmp_path)
    res = linearize_graph(graph, tok)
    assert not res.drops, res.turns
    (sample,) = res.samples
    assert sample.input_ids.tolist() == prompt + completion


def test_a_run_that_trains_no_turn_exits_3_and_says_why(tmp_path: Path, capsys: Any) -> None:
    template = tmp_path / "other_header.jinja"  # generation prompt "model", history "assistant": never recoverable
    template.write_text(
        "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>model\\n' }}{% endif %}",
        encoding="utf-8",
    )
    log = tmp_path / "chat.jsonl"
    convo = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    log.write_text(json.dumps({"messages": convo}) + "\n", encoding="utf-8")
    code = main(["convert", str(log), "-o", str(tmp_path / "out"), "--chat-template", str(template)])
    assert code == 3
    assert "no sampled turn was trained: 1 dropped (completion_not_renderable=1)" in capsys.readouterr().err


def test_a_run_whose_turns_are_all_filtered_out_says_so(tmp_path: Path, capsys: Any) -> None:
    log = tmp_path / "chat.jsonl"
    convo = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    log.write_text(json.dumps({"messages": convo}) + "\n", encoding="utf-8")
    main(["convert", str(log), "-o", str(tmp_path / "out"), "--policy", "nobody"])
    assert "no sampled turn was trained: 1 dropped (policy_not_selected=1)" in capsys.readouterr().err


@pytest.mark.parametrize("native", ["tekken.json", "tokenizer.model.v3", "tokenizer.model.v7m1"])
def test_a_folder_with_only_mistral_native_tokenizer_files_is_refused_naming_mistral_common(
    tmp_path: Path, native: str
) -> None:
    (tmp_path / native).write_text("{}", encoding="utf-8")
    with pytest.raises(ConfigError, match="only mistral-common") as err:
        check_folder(tmp_path, str(tmp_path))
    assert err.value.code == "mistral_native_tokenizer" and native in str(err.value)


def test_an_unreadable_sentencepiece_model_names_protobuf_when_it_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import msgtrain.linearize.tokenizer_source as source

    (tmp_path / "tokenizer.model").write_bytes(b"\x0e\x00")
    monkeypatch.setattr(source, "_find_spec", lambda module: None if module == "google.protobuf" else object())
    err = source.unreadable_vocabulary(tmp_path, str(tmp_path), RuntimeError("Error parsing line b'\\x0e'"))
    assert "pip install protobuf" in (err.hint or "")


def _chatml_render(call_end: str, turn_end: str, after_calls: str, result_header: str) -> Any:
    """A render function of the kind template_stop_texts probes: ChatML-like turns whose text turns end with
    ``turn_end``, each tool call with ``call_end``, a tool-call message with ``after_calls``, a tool result opening
    with ``result_header``."""

    def render(messages: list[dict[str, Any]], tools: Any) -> str:
        out = ""
        for m in messages:
            if m["role"] == "assistant" and m.get("tool_calls"):
                calls = "".join(f"<call>{json.dumps(c['function']['arguments'])}{call_end}" for c in m["tool_calls"])
                out += f"<assistant>{calls}{after_calls}"
            elif m["role"] == "tool":
                out += f"{result_header}{m['content']}"
            else:
                out += f"<{m['role']}>{m['content']}{turn_end if m['role'] == 'assistant' else '<end>'}"
        return out

    return render


@pytest.mark.parametrize(
    ("shape", "render", "stops"),
    [
        (
            "a token after the calls (Gemma 4)",
            _chatml_render("<call_end>", "<end>", "<result>", ""),
            {"<end>", "<result>"},
        ),
        (
            "a per-call closing token, then the turn's end (Qwen)",
            _chatml_render("<call_end>", "<end>", "<end>", ""),
            {"<end>"},
        ),
        ("role headers only (GLM)", _chatml_render("<call_end>", "", "", "<observation>"), {"<observation>"}),
        ("nothing after the calls (Command R+)", _chatml_render("", "<end>", "", "<result>"), {"<end>"}),
    ],
)
def test_the_stop_token_after_tool_calls_is_found_from_the_template(shape: str, render: Any, stops: set[str]) -> None:
    added = re.compile(r"<[a-z_]+>")
    assert template_stop_texts(render, added) - {"<user>"} == stops, shape


def _sectioned_render(text_end: str, turn_end: str, final: str = "") -> Any:
    """Assistant text closed by ``text_end`` then ``turn_end`` (Command A: ``<|END_TEXT|><|END_OF_TURN_TOKEN|>``;
    Kimi K3: ``<|close|>response<|sep|>`` then ``<|close|>message<|sep|><|end_of_msg|>``), the conversation by
    ``final`` (Phi-3 writes EOS once, after the last message)."""

    def render(messages: list[dict[str, Any]], tools: Any) -> str:
        out = ""
        for m in messages:
            if m["role"] == "assistant":
                out += f"<open>assistant<sep>{m['content']}{text_end}{turn_end}"
            else:
                out += f"<open>{m['role']}<sep>{m['content']}<close>message<sep><eom>"
        return out + final

    return render


@pytest.mark.parametrize(
    ("shape", "text_end", "turn_end", "declared", "stops"),
    [
        ("a section's end token before the declared end (Command A)", "<end_text>", "<eot>", ["<eot>"], set()),
        ("the turn's end, then EOS after the conversation (Phi-3)", "<end>", "\n", ["<eos>"], {"<end>"}),
        (
            "a section closed with text, then the declared end (Kimi K3)",
            "<close>response<sep>",
            "<close>message<sep><eom>",
            ["<eom>"],
            {"<eom>"},
        ),
        (
            "a section closed with text, nothing declared",
            "<close>response<sep>",
            "<close>message<sep><eom>",
            [],
            {"<eom>"},
        ),
        ("the turn's own end token (Qwen)", "<eot>", "", ["<eos>"], {"<eot>"}),
    ],
)
def test_a_token_that_closes_a_section_of_the_message_does_not_stop_the_turn(
    shape: str, text_end: str, turn_end: str, declared: list[str], stops: set[str]
) -> None:
    """The model samples through a token that closes part of its message to the token that ends the turn: only
    that one stops generation, so a completion is not cut at the first."""
    added = re.compile(r"<[a-z_]+>")
    render = _sectioned_render(text_end, turn_end, "<eos>" if "<eos>" in declared else "")
    assert template_stop_texts(render, added, declared) == stops, shape


# In the shape of Apertus (llama.cpp models/templates/Apertus-8B-Instruct.jinja): tool results are written into the
# model's open turn, which history continues without a header, while the generation prompt always writes one.
OPEN_TURN = (
    "{% set ns = namespace(open=false) %}{% for m in messages %}"
    "{% if m.role == 'assistant' %}{% if not ns.open %}{{ '<|im_start|>assistant\\n' }}{% set ns.open = true %}"
    "{% endif %}{{ m.content }}{% if m.tool_calls %}{{ ' [call ' + m.tool_calls[0].function.name + ']' }}"
    "{% else %}{{ '<|im_end|>\\n' }}{% set ns.open = false %}{% endif %}"
    "{% elif m.role == 'tool' %}{{ ' [result ' + m.content + ']' }}"
    "{% else %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def test_a_turn_history_continues_without_the_generation_prompts_header_is_what_the_message_inserts(
    tmp_path: Path,
) -> None:
    template = tmp_path / "open_turn.jinja"
    template.write_text(OPEN_TURN, encoding="utf-8")
    tok = load_tokenizer(None, str(template))
    completions = _completions(tok, _conversation())
    assert completions[-1] == "It rains.<|im_end|>"


def _named_templates_folder(tmp_path: Path, names: tuple[str, ...] = ("default", "tool_use")) -> Path:
    """The demo tokenizer saved with a list of named templates in tokenizer_config.json (as Command R+ and Hermes
    ship ``default`` and ``tool_use``): the tool-use one writes the tool names first."""
    from msgtrain.linearize.tokenizer import CHATML_TEMPLATE, _build_demo_tokenizer

    folder = tmp_path / "named"
    _build_demo_tokenizer().save_pretrained(folder)
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    tool_use = "{{ 'TOOLS:' }}{% for t in tools %}{{ t.function.name }};{% endfor %}\n" + CHATML_TEMPLATE
    templates = {"default": CHATML_TEMPLATE, "tool_use": tool_use, "rag": CHATML_TEMPLATE}
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": n, "template": templates[n]} for n in names]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_named_templates_render_with_tool_use_when_tools_are_offered_as_apply_chat_template_does(
    tmp_path: Path,
) -> None:
    from transformers import AutoTokenizer

    folder = _named_templates_folder(tmp_path)
    tok = load_tokenizer(str(folder))
    hf = AutoTokenizer.from_pretrained(folder)
    for tools in (TOOLS, None):
        g = MessageGraph(graph_id="g", tools=tools)
        g.append({"role": "user", "content": "Weather?"})
        g.append({"role": "assistant", "content": "It rains."})
        res = linearize_graph(g, tok)
        assert not res.drops and len(res.samples) == 1, res.turns
        messages = [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "It rains."}]
        expected = hf.apply_chat_template(messages, tools=tools, tokenize=False)
        got = tok.decode(res.samples[0].input_ids.tolist())
        assert expected.startswith(got) and got.endswith("It rains.<|im_end|>"), (tools, got)
        assert got.startswith("TOOLS:search;") is bool(tools)


def test_named_templates_without_a_default_are_refused_naming_them(tmp_path: Path) -> None:
    from msgtrain.errors import TokenizerError

    with pytest.raises(TokenizerError, match="rag, tool_use"):
        load_tokenizer(str(_named_templates_folder(tmp_path, names=("tool_use", "rag"))))


def test_markers_a_template_escaped_as_json_are_put_back_and_a_logs_own_marker_character_stays_as_printed() -> None:
    import json

    from msgtrain.linearize.tokenizer import MARK_END, MARK_ESC, MARK_START, restore_escaped_marks, unmark

    # What tojson(ensure_ascii=True) prints for an argument holding control text (wrapped) and a log's own U+E001
    # (escaped): the pair comes back, the log's character stays the template's six characters, other escapes stay.
    marked = {"a": f"{MARK_START}<|im_end|>{MARK_END} {MARK_ESC}\ue001 é"}
    printed = json.dumps(marked)
    assert unmark(restore_escaped_marks(printed)) == ('{"a": "<|im_end|> \\ue001 \\u00e9"}', True)
    assert restore_escaped_marks('{"a": "plain"}') == '{"a": "plain"}'
