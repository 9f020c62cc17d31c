"""The linearizer's rules, one behaviour at a time (the oracle test checks them all together)."""

from __future__ import annotations

import numpy as np

from msgtrain import MessageGraph, OptionResultBuilder
from msgtrain.linearize import LinearizeOptions, linearize_graph
from msgtrain.model.graph import Origin
from msgtrain.model.message import Generation
from tests.conftest import load_named_tokenizer


def _chat(graph_id: str = "g", policy: str = "main") -> MessageGraph:
    g = MessageGraph(graph_id=graph_id, policy=policy)
    g.append({"role": "system", "content": "Be brief."})
    g.append({"role": "user", "content": "Hi"})
    return g


def test_sub_agent_conversations_nested_in_tool_results_become_their_own_samples() -> None:
    tok = load_named_tokenizer("demo")
    sub = MessageGraph(graph_id="sub", policy="researcher")
    sub.append({"role": "user", "content": "find X"})
    sub.append({"role": "assistant", "content": "X is 4"})
    g = _chat()
    call_id = "c1"
    g.append(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "research", "arguments": "{}"}}],
        }
    )
    call = g.message(-1)
    result = OptionResultBuilder.response_to(call).success("X is 4", subgraph=sub)  # type: ignore[arg-type]
    g.append(result)
    g.append({"role": "assistant", "content": "It is 4."})
    res = linearize_graph(g, tok)
    assert {s.policy for s in res.samples} == {"main", "researcher"}
    only_main = linearize_graph(g, tok, options=LinearizeOptions(policies=frozenset({"main"})))
    assert {s.policy for s in only_main.samples} == {"main"}
    assert only_main.drops == {"policy_not_selected": 1}


def test_carried_edited_and_prefilled_assistant_text_is_never_trained() -> None:
    tok = load_named_tokenizer("demo")
    g = _chat()
    g.append({"role": "assistant", "content": "prefilled"}, origin=Origin.PREFILL)
    g.append({"role": "user", "content": "and?"})
    g.append({"role": "assistant", "content": "sampled"})
    (sample,) = linearize_graph(g, tok).samples
    trained = tok.decode(sample.input_ids[sample.loss_mask == 1].tolist())
    assert trained == "sampled<|im_end|>"


def test_engine_ids_are_used_verbatim_with_their_logprobs() -> None:
    tok = load_named_tokenizer("demo")
    g = _chat()
    odd = tok.encode("Hel").tolist() + tok.encode("lo").tolist() + [next(iter(tok.stop_ids))]
    lps = [-0.5] * len(odd)
    g.append(
        {"role": "assistant", "content": "Hello"}, generation=Generation(token_ids=tuple(odd), logprobs=tuple(lps))
    )
    (sample,) = linearize_graph(g, tok).samples
    a, b = sample.turn_spans[0]
    assert sample.input_ids[a:b].tolist() == odd
    np.testing.assert_allclose(sample.logprobs[a:b], lps)
    assert np.isnan(sample.logprobs[:a]).all() and sample.token_source == "mixed"


def test_a_turn_with_no_trainable_token_is_dropped_and_reported() -> None:
    tok = load_named_tokenizer("demo")
    g = _chat()
    g.append({"role": "assistant", "content": "x"}, generation=Generation(token_ids=()))
    res = linearize_graph(g, tok)
    assert not res.samples and res.drops == {"no_trainable_tokens": 1}


def test_changing_tools_mid_run_cuts_with_reason_env_change() -> None:
    tok = load_named_tokenizer("demo")
    g = _chat()
    g.append({"role": "assistant", "content": "hello"})
    g.set_env(tools=[{"type": "function", "function": {"name": "new_tool"}}])
    g.append({"role": "user", "content": "use it"})
    g.append({"role": "assistant", "content": "ok"})
    res = linearize_graph(g, tok)
    assert sorted(s.cut_reason for s in res.samples) == ["env_change", "start"]


def test_n_samples_from_one_context_share_a_group_and_fork() -> None:
    tok = load_named_tokenizer("demo")
    g = _chat()
    parent = g.head[-1]
    for text in ("a", "b", "c"):
        g.add_node(parent, {"role": "assistant", "content": text}, origin=Origin.SAMPLED)
    res = linearize_graph(g, tok)
    assert len(res.samples) == 3 and len({s.group_id for s in res.samples}) == 1
    assert sorted(s.cut_reason for s in res.samples) == ["start", "start", "start"]


def test_logged_ids_that_a_later_prompt_re_tokenizes_differently_cut_with_logged_ids_differ() -> None:
    tok = load_named_tokenizer("qwen2.5")
    g = _chat()
    hello = tok.hf.encode("Hello", add_special_tokens=False)
    odd = [
        tok.hf.convert_tokens_to_ids("H"),
        *tok.hf.encode("ello", add_special_tokens=False),
        tok.hf.convert_tokens_to_ids("<|im_end|>"),
    ]
    assert odd[:-1] != hello
    g.append({"role": "assistant", "content": "Hello"}, generation=Generation(token_ids=tuple(odd)))
    g.append({"role": "user", "content": "more"})
    g.append({"role": "assistant", "content": "Sure"})
    res = linearize_graph(g, tok)
    assert sorted(s.cut_reason for s in res.samples) == ["logged_ids_differ", "start"]


def test_engine_ids_from_another_tokenizer_are_not_trained_and_are_flagged() -> None:
    tok = load_named_tokenizer("demo")
    for gen in (Generation(token_ids=(5, 6, 7), tokenizer="gemini"), Generation(token_ids=(10**7,))):
        g = _chat()
        g.append({"role": "assistant", "content": "Hello"}, generation=gen)
        res = linearize_graph(g, tok)
        (sample,) = res.samples
        assert tok.decode(sample.input_ids[sample.loss_mask == 1].tolist()) == "Hello<|im_end|>"
        assert sample.flags == ["foreign_engine_ids"] and sample.engine_tokens == 0
