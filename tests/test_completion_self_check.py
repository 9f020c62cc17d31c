"""The completion self-check: a rendered completion is trained only when it is the message it claims to be (no other
message's text, no header that opens another turn), whatever the template; and the recovery of templates whose
history moves context (the system prompt written only into the last user message) by the engine-mode rule.

The template that moves context is written for these tests (tests/fixtures/templates/moves_context.jinja); the
real one with that shape (Mistral NeMo's, llama.cpp's copy) is checked on its one-call repro and on generated runs
(the oracle of tests/oracle.py checks its exact ids in test_linearize_oracle.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msgtrain import MessageGraph
from msgtrain.cli import main
from msgtrain.linearize import linearize_graph
from msgtrain.linearize import plan as plan_module
from msgtrain.linearize.completion import NotRecoverable, foreign_text, message_texts, own_material
from tests.conftest import load_named_tokenizer, shaped_tokenizer_folder
from tests.oracle import RunGenerator, to_records
from tests.test_linearize_oracle import _graphs_from_records, _oracle

AIRLINE = [
    {"role": "system", "content": "You are an airline agent."},
    {"role": "user", "content": "Hi! I want to book a flight."},
    {"role": "assistant", "content": "Sure, what is your user ID?"},
    {"role": "user", "content": "It is mia_li_3668, thanks."},
    {"role": "assistant", "content": "Found you. Where are you flying to?"},
]


def _graph(messages: list[dict[str, Any]], **kwargs: Any) -> MessageGraph:
    g = MessageGraph(graph_id="g", template_kwargs=kwargs or None)
    for m in messages:
        g.append(m)
    return g


def _trained(tok: Any, res: Any) -> list[str]:
    return [tok.decode(s.input_ids[a:b].tolist()) for s in res.samples for a, b in s.turn_spans]


def test_a_template_whose_history_moves_context_trains_each_reply_as_the_model_sampled_it() -> None:
    tok = load_named_tokenizer("moves-context")
    res = linearize_graph(_graph(AIRLINE), tok)
    assert not res.drops, res.turns
    assert sorted(_trained(tok, res)) == [
        "Found you. Where are you flying to?<|eot|>",
        "Sure, what is your user ID?<|eot|>",
    ]


def test_where_history_puts_the_reply_differently_from_the_prompt_the_turn_is_dropped_with_its_reason() -> None:
    # With ``gap`` history writes a newline before a reply that no prompt ends with: not well defined.
    tok = load_named_tokenizer("moves-context")
    res = linearize_graph(_graph(AIRLINE, gap=True), tok)
    assert res.drops == {"completion_mismatch": 2} and not res.samples
    why = [t.message or "" for t in res.turns if t.status == "dropped"]
    assert all("another message's text" in w or "opens another turn" in w for w in why), why
    assert all("does not end as the generation prompt" in w for w in why), why


def test_the_self_check_alone_catches_a_completion_holding_another_message(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the engine-mode recovery the rule takes everything from the first difference on (the user's text and
    # its end token): the self-check, which names no template, drops it.
    def no_recovery(*args: Any, **kwargs: Any) -> tuple[int, int]:
        raise NotRecoverable("recovery disabled for this test")

    monkeypatch.setattr(plan_module, "moved_context_span", no_recovery)
    tok = load_named_tokenizer("moves-context")
    res = linearize_graph(_graph(AIRLINE), tok)
    assert res.drops == {"completion_mismatch": 2} and not res.samples


def test_a_dropped_mismatch_is_listed_by_inspect_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_recovery(*args: Any, **kwargs: Any) -> tuple[int, int]:
        raise NotRecoverable("recovery disabled for this test")

    monkeypatch.setattr(plan_module, "moved_context_span", no_recovery)
    log = tmp_path / "calls.jsonl"
    request = {"model": "m", "messages": AIRLINE[:2]}
    response = {"choices": [{"message": {"role": "assistant", "content": "Sure, what is your user ID?"}}]}
    log.write_text(json.dumps({"request": request, "response": response}) + "\n", encoding="utf-8")
    folder = shaped_tokenizer_folder("moves-context")
    main(["inspect", str(log), "--tokenizer", str(folder)])
    out = capsys.readouterr().out
    assert "dropped: completion_mismatch" in out


def test_nemos_one_call_repro_trains_exactly_the_reply() -> None:
    tok = load_named_tokenizer("mistral-nemo")
    res = linearize_graph(_graph(AIRLINE[:3]), tok)
    assert not res.drops, res.turns
    assert _trained(tok, res) == ["Sure, what is your user ID?</s>"]


@pytest.mark.parametrize("seed", [3, 4])
def test_no_completion_trained_on_generated_nemo_runs_holds_another_messages_text(seed: int, tmp_path: Path) -> None:
    tok, oracle = _oracle("mistral-nemo")
    calls = RunGenerator(seed, "mistral-nemo", with_tools=True, hard=0.5).run(n_turns=7)
    import random

    records = to_records(oracle, calls, random.Random(seed), 0.0)
    headers = {tok.hf.added_tokens_encoder[t] for t in ("[INST]", "[/INST]")}
    trained = 0
    for g in _graphs_from_records(records, tmp_path):
        res = linearize_graph(g, tok)
        texts = {nid: " ".join(str(n.message.text or "").split()) for nid, n in g.nodes.items()}
        for s in res.samples:
            for nid, (a, b) in zip(s.turn_ids, s.turn_spans, strict=True):
                completion = " ".join(tok.decode(s.input_ids[a:b].tolist()).split())
                trained += 1
                for other, text in texts.items():
                    if other != nid and len(text) >= 8 and text not in texts[nid]:
                        assert text not in completion, (text, completion)
                # No header that opens a turn (as a token: content may carry its text, encoded as plain text).
                assert not {int(i) for i in s.input_ids[a:b]} & headers
    assert trained >= 3


def test_a_reply_that_quotes_another_message_is_not_a_mismatch() -> None:
    reply = {"role": "assistant", "content": 'You said "Hi! I want to book a flight." Where to?'}
    user = message_texts({"role": "user", "content": "Hi! I want to book a flight."})
    completion = 'You said "Hi! I want to book a flight." Where to?</s>'
    assert foreign_text(completion, own_material(reply), [user]) is None
    # The same text the reply does not hold is another message's.
    assert foreign_text("Hi! I want to book a flight.[/INST]Sure.</s>", own_material({"content": "Sure."}), [user])
    # Tool-call arguments count as the reply's own, as printed (JSON) or as their values.
    call = {"role": "assistant", "tool_calls": [{"function": {"name": "read", "arguments": {"path": "/src/app.py"}}}]}
    assert foreign_text('<call>{"path": "/src/app.py"}</call>', own_material(call), [("/src/app.py",)]) is None
    # Short texts are not looked for: they occur anywhere.
    assert message_texts({"content": "ok"}) == ()


def test_audit_template_says_what_convert_does_with_a_template_whose_history_moves_context() -> None:
    from msgtrain.tools.audit_cmd import audit_template

    folder = shaped_tokenizer_folder("moves-context")
    report = audit_template(folder, features=["system_prompt"])
    (probe,) = report.probes
    assert probe.status == "breaks" and "history moves context" in probe.detail
    assert "engine-mode rule" in probe.detail and len(probe.moved_context) == 2
    report = audit_template(folder, features=["system_prompt"], template_kwargs={"gap": True})
    (probe,) = report.probes
    assert probe.status == "breaks" and "convert drops such turns (completion_mismatch" in probe.detail
