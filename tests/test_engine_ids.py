"""Logged engine ids are checked against the logged text: ids that do not decode to the reply (or the prompt) are
never trained silently (dropped as ``engine_ids_mismatch``, or rendered / kept flagged when the user says so)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from msgtrain import MessageGraph
from msgtrain.cli import main
from msgtrain.linearize import LinearizeOptions, linearize_graph
from msgtrain.linearize.engine_ids import ENGINE_IDS_MISMATCH
from msgtrain.model.message import Generation
from tests.conftest import load_named_tokenizer

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"


def _graph(reply: str, ids: list[int], prompt_ids: list[int] | None = None) -> MessageGraph:
    g = MessageGraph(graph_id="g", policy="main")
    g.append({"role": "user", "content": "How many legs has a dog?"})
    g.append(
        {"role": "assistant", "content": reply},
        generation=Generation(
            token_ids=tuple(ids), logprobs=tuple([-0.1] * len(ids)), prompt_token_ids=prompt_ids and tuple(prompt_ids)
        ),
    )
    return g


def _stop(tok) -> int:  # type: ignore[no-untyped-def]
    return int(next(iter(tok.stop_ids)))


def test_ids_that_decode_to_the_reply_are_trained_verbatim() -> None:
    tok = load_named_tokenizer("demo")
    ids = [*tok.encode("Four").tolist(), _stop(tok)]
    (sample,) = linearize_graph(_graph("Four", ids), tok).samples
    a, b = sample.turn_spans[0]
    assert sample.input_ids[a:b].tolist() == ids and ENGINE_IDS_MISMATCH not in sample.flags


def test_ids_of_other_text_are_dropped_with_their_reason_by_default() -> None:
    tok = load_named_tokenizer("demo")
    ids = [*tok.encode(",.").tolist(), _stop(tok)]
    res = linearize_graph(_graph("Four", ids), tok)
    assert not res.samples and res.drops == {ENGINE_IDS_MISMATCH: 1}
    (outcome,) = res.turns
    assert "','" not in (outcome.message or "") and "',.<|im_end|>'" in (outcome.message or "")
    assert "'Four'" in (outcome.message or "")


def test_render_trains_the_logged_text_and_keep_trains_the_ids_both_flagged() -> None:
    tok = load_named_tokenizer("demo")
    bad = [*tok.encode(",.").tolist(), _stop(tok)]
    rendered = linearize_graph(_graph("Four", bad), tok, options=LinearizeOptions(engine_ids_mismatch="render"))
    (sample,) = rendered.samples
    a, b = sample.turn_spans[0]
    assert tok.decode(sample.input_ids[a:b].tolist()) == "Four<|im_end|>" and ENGINE_IDS_MISMATCH in sample.flags
    assert sample.engine_tokens == 0 and np.isnan(sample.logprobs).all()  # the logged logprobs were of other ids
    kept = linearize_graph(_graph("Four", bad), tok, options=LinearizeOptions(engine_ids_mismatch="keep"))
    (sample,) = kept.samples
    a, b = sample.turn_spans[0]
    assert sample.input_ids[a:b].tolist() == bad and ENGINE_IDS_MISMATCH in sample.flags


def test_whitespace_engines_strip_is_not_a_mismatch_but_a_missing_reasoning_or_tool_name_is() -> None:
    tok = load_named_tokenizer("demo")
    ids = [*tok.encode("\n\nFour  legs.\n").tolist(), _stop(tok)]
    assert linearize_graph(_graph("Four legs.", ids), tok).samples
    g = MessageGraph(graph_id="g", policy="main")
    g.append({"role": "user", "content": "Weather?"})
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    text = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    ids = [*tok.encode(text).tolist(), _stop(tok)]
    g.append({"role": "assistant", "content": "", "tool_calls": [call]}, generation=Generation(token_ids=tuple(ids)))
    assert linearize_graph(g, tok).drops == {ENGINE_IDS_MISMATCH: 1}


def test_prompt_ids_without_the_last_user_message_are_a_mismatch() -> None:
    tok = load_named_tokenizer("demo")
    ids = [*tok.encode("Four").tolist(), _stop(tok)]
    good = tok.encode("<|im_start|>user\nHow many legs has a dog?<|im_end|>\n<|im_start|>assistant\n").tolist()
    (sample,) = linearize_graph(_graph("Four", ids, good), tok).samples
    assert sample.input_ids[: len(good)].tolist() == good
    other = tok.encode("<|im_start|>user\nHow many legs has a cat?<|im_end|>\n<|im_start|>assistant\n").tolist()
    assert linearize_graph(_graph("Four", ids, other), tok).drops == {ENGINE_IDS_MISMATCH: 1}


def test_qwen3_ids_of_other_text_in_range_are_caught() -> None:
    """The case the range check missed: in-vocabulary Qwen3 ids that decode to ``",."`` where the log says Four."""
    tok = load_named_tokenizer("qwen3")
    ids = [*tok.encode(",.").tolist(), _stop(tok)]
    assert max(ids) < len(tok.hf)
    assert linearize_graph(_graph("Four", ids), tok).drops == {ENGINE_IDS_MISMATCH: 1}
    good = [*tok.encode("Four").tolist(), _stop(tok)]
    assert linearize_graph(_graph("Four", good), tok).samples


def test_a_log_whose_ids_are_not_its_text_is_never_trained_silently(tmp_path: Path) -> None:
    record = json.loads((SAMPLES / "calls/streamed_chunks.jsonl").read_text())
    for chunk in record["response"]:
        for choice in chunk["choices"]:
            choice["token_ids"] = [11 + i for i, _ in enumerate(choice["token_ids"])]
    path = tmp_path / "logs" / "bad.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps(record) + "\n")
    assert main(["convert", str(path), "-o", str(tmp_path / "out"), "-q"]) == 3  # a drop that is a failure
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["turns"]["dropped_by_reason"] == {ENGINE_IDS_MISMATCH: 2} and report["samples"]["written"] == 0
    out = tmp_path / "flagged"
    assert main(["convert", str(path), "-o", str(out), "-q", "--engine-ids-mismatch", "render"]) == 0
    rows = [r for f in sorted((out / "data").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    assert len(rows) == 2 and all(ENGINE_IDS_MISMATCH in r["flags"] for r in rows)
    assert json.loads((out / "report.json").read_text())["flags"][ENGINE_IDS_MISMATCH] == 2


@pytest.mark.parametrize("policy", ["drop", "render", "keep"])
def test_the_mismatch_policy_is_part_of_the_parts_key(policy: str) -> None:
    from msgtrain.run.config import ConvertConfig
    from msgtrain.run.parts import settings_from_config

    keys = {
        p: settings_from_config(ConvertConfig(inputs=["x"], output="o", engine_ids_mismatch=p)).key("t")
        for p in ("drop", "render", "keep")
    }
    assert len(set(keys.values())) == 3 and keys[policy]


# --- the behaviour policy beside the ids ---------------------------------------------------------------------


def test_rl_rows_carry_the_behaviour_policys_model_and_sampling_and_the_report_counts_them(tmp_path: Path) -> None:
    record = json.loads((SAMPLES / "calls/streamed_chunks.jsonl").read_text())
    record["request"].update(temperature=0.7, top_p=0.9, top_k=20)
    plain = json.loads(json.dumps(record))
    plain["request"] = {"model": "local-model", "messages": [{"role": "user", "content": "Flip a coin."}]}
    for chunk in plain["response"]:
        for choice in chunk["choices"]:
            choice.pop("token_ids")
            choice["logprobs"] = None
    path = tmp_path / "logs" / "calls.jsonl"
    path.parent.mkdir()
    path.write_text(json.dumps(record) + "\n" + json.dumps(plain) + "\n")
    out = tmp_path / "out"
    assert main(["convert", str(path), "-o", str(out), "-q", "--target", "rl"]) == 0
    rows = [r for f in sorted((out / "data").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    sampled = [r for r in rows if r["logprobs_complete"]]
    assert len(sampled) == 2 and len(rows) == 4
    for r in sampled:
        assert (r["behaviour_model"], r["temperature"], r["top_p"], r["top_k"]) == ("local-model", 0.7, 0.9, 20)
        assert json.loads(r["metadata"])["behaviour"] == {
            "model": "local-model",
            "temperature": 0.7,
            "top_p": 0.9,
            "top_k": 20,
        }
    for r in rows:
        if not r["logprobs_complete"]:  # the log names the model only
            assert (r["behaviour_model"], r["temperature"]) == ("local-model", None)
    report = json.loads((out / "report.json").read_text())
    assert report["behaviour"] == {"rows_with_complete_logprobs": 2, "rows_naming_the_model_or_sampling": 4}


def test_turns_sampled_differently_keep_their_behaviour_per_turn() -> None:
    from msgtrain.linearize.behaviour import sample_behaviour

    hot, cold = (
        Generation(model="m", sampling={"temperature": 1.0, "topK": 5}),
        Generation(model="m", sampling={"temperature": 0.2}),
    )
    assert sample_behaviour([hot, hot]) == {"model": "m", "temperature": 1.0, "top_k": 5}
    assert sample_behaviour([hot, None]) == {"per_turn": [{"model": "m", "temperature": 1.0, "top_k": 5}, None]}
    assert sample_behaviour([cold, hot])["per_turn"][0] == {"model": "m", "temperature": 0.2}
    assert sample_behaviour([None, Generation()]) is None
