"""`msgtrain inspect`: the graph tree, samples with trained tokens per turn, cut points — from logs and datasets."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msgtrain import MessageBuilder, MessageGraph, OptionResultBuilder
from msgtrain.cli import main
from msgtrain.errors import ConfigError
from msgtrain.linearize import load_tokenizer
from msgtrain.model.message import text_message
from msgtrain.tools.inspect_cmd import LISTING_ROWS, inspect_input
from msgtrain.tools.sample_view import token_pieces
from tests.conftest import SAMPLE_LOGS, shared_path

WEATHER_TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "description": "Current weather", "parameters": {"type": "object"}},
}


@pytest.fixture()
def weather(tmp_path: Path) -> Path:
    """A native graph log with three sampled turns, then an edit and a compaction of seen history."""
    g = MessageGraph(graph_id="weather", policy="assistant-v1", tools=[WEATHER_TOOL])
    g.append({"role": "system", "content": "You are a concise travel assistant."})
    g.append({"role": "user", "content": "What's the weather in Paris?"})
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    g.append({"role": "assistant", "content": "Let me check.", "tool_calls": [call]})
    g.append({"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 18}'})
    g.append({"role": "assistant", "content": "Paris is 18 C."})
    g.append({"role": "user", "content": "Umbrella?"})
    g.append({"role": "assistant", "content": "Probably not."})
    g[1] = {"role": "user", "content": "What's the weather in Lyon?"}  # seen history: a new branch
    g.append({"role": "assistant", "content": "Lyon is similar."})
    g[1:7] = [{"role": "user", "content": "Summary so far: Lyon and Paris are mild."}]
    g.append({"role": "user", "content": "Berlin?"})
    g.append({"role": "assistant", "content": "Berlin: rain."})
    path = tmp_path / "weather.graph.jsonl"
    g.save(path)
    return path


def subagent_log(path: Path) -> Path:
    """A lead agent that delegates to a sub-agent whose own conversation rides in the tool result."""
    sub = MessageGraph(graph_id="sub-1", policy="researcher")
    sub.append(text_message("user", "Find the boiling point of water."))
    sub.append(text_message("assistant", "100 C at sea level.", policy="researcher"))
    g = MessageGraph(graph_id="main-1", policy="lead")
    g.append(text_message("user", "How hot does water boil?"))
    b = MessageBuilder.next_step(None, policy="lead")
    b.add_text("Delegating.")
    b.add_option_call("research", {"q": "boiling"})
    call = b.to_message()
    g.append(call)
    g.append(OptionResultBuilder.response_to(call).success("100 C", subgraph=sub))
    g.append(MessageBuilder.next_step(call, policy="lead").add_text("Water boils at 100 C.").to_message())
    g.save(path)
    return path


def test_a_graph_log_shows_versions_origins_and_which_sample_trains_each_turn(
    capsys: pytest.CaptureFixture[str], weather: Path
) -> None:
    assert main(["inspect", str(weather)]) == 0
    out = capsys.readouterr().out
    assert "MessageGraph weather · policy assistant-v1 · 18 nodes, 3 branches, 2 versions (compaction, edit)" in out
    assert "[edit] [Human] What's the weather in Lyon?" in out
    assert "[compaction: 6 messages → 1] [Human] Summary so far" in out
    assert "[AI] Probably not.  (carried)" in out
    assert "[AI] Probably not.  (sampled · trained: sample " in out
    assert "cut: start" in out and "cut: edit" in out and "cut: compaction" in out
    # The cut points are marked inside the token text, where the sample leaves the earlier version.
    assert "What's the weather in ✂ edit Lyon?" in out
    assert "✂ compaction Summary so far" in out


def test_every_sample_log_inspects_with_each_sampled_turn_accounted_for() -> None:
    from msgtrain.run.plan import discover_inputs

    # What discovery hands over: files, and folders a directory reader takes whole (their files are not inputs).
    logs, _ = discover_inputs([str(SAMPLE_LOGS)])
    inspected = 0
    for log in logs:
        try:
            ins = inspect_input(log)
        except ConfigError as e:
            # Some files only carry telemetry next to the conversation file; they must say so.
            assert "no conversation" in e.message and "skipped" in (e.hint or ""), str(e)
            continue
        inspected += 1
        lines = [line for tree in ins.trees for line in tree]
        for line in lines:
            outcomes = [kind for _, kind in line.tags if kind in ("trained", "dropped")]
            if ("sampled", "sampled") in line.tags:
                assert len(outcomes) == 1, f"{log}: a sampled turn with outcomes {outcomes}"
            else:
                # A reply logged only as context (carried) is in the books as dropped, never trained.
                assert outcomes in ([], ["dropped"]), f"{log}: a turn that was not sampled has outcomes {outcomes}"
    assert inspected >= len(logs) // 2, "most sample logs hold a conversation"


def test_each_trained_turn_is_tagged_in_the_tree_exactly_once(weather: Path) -> None:
    ins = inspect_input(weather)
    tags = [text for line in ins.trees[0] for text, kind in line.tags if kind == "trained"]
    expected = [f"trained: sample {v.index}, turn {t}" for v in ins.views for t in range(len(v.turn_ids))]
    assert sorted(tags) == sorted(expected)
    sampled = [line for line in ins.trees[0] if ("sampled", "sampled") in line.tags]
    assert len(sampled) == len(tags), "every sampled turn is trained once in this log"


def test_the_cut_point_is_where_the_sample_leaves_the_version_it_replaced(weather: Path) -> None:
    ins = inspect_input(weather)
    by_cut = {v.cut_reason: v for v in ins.views}
    first, edited, compacted = by_cut["start"], by_cut["edit"], by_cut["compaction"]
    assert first.cut_at is None
    assert edited.cut_at is not None and compacted.cut_at is not None
    assert np.array_equal(edited.input_ids[: edited.cut_at], first.input_ids[: edited.cut_at])
    assert edited.input_ids[edited.cut_at] != first.input_ids[edited.cut_at]
    assert ins.decode(edited.input_ids[: edited.cut_at].tolist()).endswith("What's the weather in ")
    assert ins.decode(compacted.input_ids[compacted.cut_at :].tolist()).startswith("Summary so far")
    # Nothing trained lies before a cut: the cut is in the context of the sample's first trained turn.
    for v in (edited, compacted):
        assert v.cut_at is not None and v.cut_at < v.turn_spans[0][0]


def test_sub_agent_graphs_nest_under_their_tool_result_and_get_their_own_samples(tmp_path: Path) -> None:
    ins = inspect_input(subagent_log(tmp_path / "agents.graph.jsonl"))
    lines = ins.trees[0]
    header = next(line for line in lines if line.header and line.depth == 1)
    assert header.text.startswith("MessageGraph sub-1") and ("sub-agent", "subagent") in header.tags
    nested = [line for line in lines if line.depth == 1 and not line.header]
    assert [line.text for line in nested] == ["[Human] Find the boiling point of water.", "[AI] 100 C at sea level."]
    assert all(line.guide.endswith("┆  ") for line in nested)
    assert {v.graph_id for v in ins.views} == {"main-1", "sub-1"}
    assert any(("step 1", "step") in line.tags for line in lines)


def test_dropped_turns_are_tagged_with_their_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template = tmp_path / "no_tools.jinja"
    template.write_text(
        "{%- for m in messages -%}{%- if m.role == 'tool' -%}{{ raise_exception('no tool role here') }}{%- endif -%}"
        "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor -%}"
        "{%- if add_generation_prompt -%}<|im_start|>assistant\n{% endif -%}"
    )
    log = subagent_log(tmp_path / "agents.graph.jsonl")
    assert main(["inspect", str(log), "--chat-template", str(template)]) == 0
    out = capsys.readouterr().out
    assert "dropped: render_error" in out
    assert "no tool role here" in out


def test_graph_and_sample_selection_errors_name_what_exists(weather: Path) -> None:
    with pytest.raises(ConfigError, match="no graph with id 'nope'") as err:
        inspect_input(weather, graph="nope")
    assert "weather" in (err.value.hint or "")
    assert inspect_input(weather, graph="wea").trees[0][0].text.startswith("MessageGraph weather")
    with pytest.raises(ConfigError, match="out of range: the graph has 3 samples"):
        inspect_input(weather, sample="3")
    only = inspect_input(weather, sample="2")
    assert [v.index for v in only.views] == [2] and only.total == 3


def test_html_page_is_self_contained_and_highlights_exactly_the_trained_tokens(tmp_path: Path, weather: Path) -> None:
    page = tmp_path / "view.html"
    assert main(["inspect", str(weather), "--html", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert (
        text.startswith("<!DOCTYPE html>")
        and "<script" not in text
        and "http" not in text.lower().replace("http-equiv", "")
    )

    class Collect(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.stack: list[str] = []
            self.trained: dict[str, int] = {}
            self.section = ""
            self.unbalanced = False

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag in ("meta", "br"):
                return
            self.stack.append(tag)
            a = dict(attrs)
            if tag == "section":
                self.section = a.get("id") or ""
            classes = (a.get("class") or "").split()
            if tag == "span" and "t" in classes and any(c.startswith("turn") for c in classes):
                self.trained[self.section] = self.trained.get(self.section, 0) + 1

        def handle_endtag(self, tag: str) -> None:
            if not self.stack or self.stack.pop() != tag:
                self.unbalanced = True

    parser = Collect()
    parser.feed(text)
    assert not parser.unbalanced and not parser.stack
    ins = inspect_input(weather)
    assert parser.trained == {f"sample-{v.index}": v.num_trained for v in ins.views}
    assert "[compaction: 6 messages → 1]" in text and "✂ edit" in text


def test_html_escapes_text_from_the_log(tmp_path: Path) -> None:
    g = MessageGraph(graph_id="xss")
    g.append(text_message("user", "<script>alert(1)</script> & <b>"))
    g.append(text_message("assistant", "I will not run <img src=x onerror=alert(1)>."))
    log = tmp_path / "x.graph.jsonl"
    g.save(log)
    page = tmp_path / "x.html"
    assert main(["inspect", str(log), "--html", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert "<script" not in text and "<img" not in text
    assert "&lt;script&gt;" in text


def test_a_dataset_row_reads_back_exactly_as_it_was_linearized(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], weather: Path
) -> None:
    out = tmp_path / "out"
    assert main(["convert", str(weather), "-o", str(out), "-q"]) == 0
    live = inspect_input(weather)
    for view in live.views:
        back = inspect_input(out, sample=view.sample_id[:10])
        [row] = back.views
        assert row.sample_id == view.sample_id
        assert np.array_equal(row.input_ids, view.input_ids)
        assert row.turn_spans == view.turn_spans and row.cut_reason == view.cut_reason
        assert row.cut_at == view.cut_at
    edited = next(v.index for v in live.views if v.cut_reason == "edit")
    assert main(["inspect", str(out), "--sample", str(edited)]) == 0
    shown = capsys.readouterr().out
    assert f"sample {edited} (of 3)" in shown and "✂ edit" in shown
    assert "a dataset stores samples, not graphs" in shown


def test_a_dataset_without_a_sample_lists_its_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["convert", str(SAMPLE_LOGS), "-o", str(out), "-q"]) == 0
    ins = inspect_input(out)
    report = json.loads((out / "report.json").read_text())
    assert ins.total == report["samples"]["written"]
    assert len(ins.listing) == min(ins.total, LISTING_ROWS)
    assert [r["index"] for r in ins.listing] == list(range(len(ins.listing)))
    assert main(["inspect", str(out)]) == 0
    shown = capsys.readouterr().out
    assert f"{ins.total} samples" in shown and "show one with --sample N" in shown
    with pytest.raises(ConfigError, match="out of range"):
        inspect_input(out, sample=str(ins.total))
    with pytest.raises(ConfigError, match="--graph selects a graph in logs"):
        inspect_input(out, graph="x")


def test_a_real_tokenizer_shows_its_control_tokens_and_turns(capsys: pytest.CaptureFixture[str], weather: Path) -> None:
    qwen3 = shared_path("tokenizers", "qwen3")
    ins = inspect_input(weather, tokenizer=str(qwen3), sample="0")
    [view] = ins.views
    assert ins.decode(view.input_ids.tolist()).startswith("<|im_start|>system")
    pieces = token_pieces(ins.decode, view.input_ids.tolist())
    trained = ["".join(pieces[a:b]) for a, b in view.turn_spans]
    assert all(t.endswith("<|im_end|>") for t in trained)
    assert main(["inspect", str(weather), "--tokenizer", str(qwen3), "--sample", "0"]) == 0
    assert "tokenized with the embedded demo tokenizer" not in capsys.readouterr().out


@pytest.mark.parametrize("name", ["qwen3", "phi-3-mini-instruct"])
def test_token_pieces_concatenate_to_the_decoded_text_on_real_tokenizers(name: str) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(shared_path("tokenizers", name)))
    text = "Héllo wörld — 日本語のテキスト 🎉🎉 tabs\tand\nnewlines  double  spaces"
    ids = tok.encode(text, add_special_tokens=False)

    def decode(x: list[int]) -> str:
        return str(tok.decode(x))

    pieces = token_pieces(decode, ids)
    assert len(pieces) == len(ids)
    assert "".join(pieces) == decode(ids)


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_token_pieces_concatenate_to_the_decoded_text_for_any_text(text: str) -> None:
    tok = load_tokenizer(None)  # byte-level: every multi-byte character is split over several tokens
    ids = tok.encode(text).tolist()
    assert "".join(token_pieces(tok.decode, ids)) == tok.decode(ids)


def test_a_directory_is_read_only_as_far_as_the_chosen_graph(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("a", "b", "c"):
        g = MessageGraph(graph_id=f"graph-{name}")
        g.append(text_message("user", f"question {name}"))
        g.append(text_message("assistant", f"answer {name}"))
        g.save(logs / f"{name}.graph.jsonl")
    first = inspect_input(logs)
    assert first.trees[0][0].text.startswith("MessageGraph graph-a")
    assert "2 more files not read: pass --graph ID to look further" in first.notes
    second = inspect_input(logs, graph="graph-b")
    assert second.trees[0][0].text.startswith("MessageGraph graph-b")
    assert "1 more file not read: pass --graph ID to look further" in second.notes
    with pytest.raises(ConfigError, match="matches 3 graphs"):
        inspect_input(logs, graph="graph-")
