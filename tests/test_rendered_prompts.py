"""Prompts a chat template already rendered, parsed back into messages (msgtrain.ingest.common.rendered_prompts), and
the logged text preferred as the prompt where this tokenizer's template renders those messages differently.

Fixtures are written here in the shape of real files (the data is not copied); each comment names the source.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.common.rendered_prompts import parse_rendered_prompt
from msgtrain.ingest.core.base import ReadGraph
from msgtrain.ingest.detect import detect_format
from msgtrain.linearize import load_tokenizer
from msgtrain.run.parts import LinearizeSettings, convert_file


def _settings(chat_template: str | None = None) -> LinearizeSettings:
    return LinearizeSettings(
        tokenizer=None, chat_template=chat_template, policies=(), render_date="2025-01-01", input_format=None
    )


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _said(path: Path) -> list[tuple[str, str]]:
    (graph,) = [e for e in read_events(detect_format(path), path) if isinstance(e, ReadGraph)]
    return [
        (n.message.role, "".join(getattr(p, "text", "") for p in getattr(n.message, "parts", ())))
        for n in graph.graph.nodes.values()
    ]


S, U, A = "Be brief.", "2+2?", "4"
FAMILIES = [
    # ChatML (Qwen): veRL / SkyRL rollout dumps, TRL DPO files with a rendered prompt
    ("chatml", f"<|im_start|>system\n{S}<|im_end|>\n<|im_start|>user\n{U}<|im_end|>\n<|im_start|>assistant\n", True),
    (
        "llama3",
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        f"{S}<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n{U}<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        True,
    ),
    ("gemma", f"<bos><start_of_turn>user\n{U}<end_of_turn>\n<start_of_turn>model\n", False),
    ("phi3", f"<|system|>\n{S}<|end|>\n<|user|>\n{U}<|end|>\n<|assistant|>\n", True),
    ("zephyr", f"<|system|>\n{S}</s>\n<|user|>\n{U}</s>\n<|assistant|>\n", True),
    ("deepseek", f"<｜begin▁of▁sentence｜>{S}<｜User｜>{U}<｜Assistant｜>", True),
    ("inst", f"<s>[INST] <<SYS>>\n{S}\n<</SYS>>\n\n{U} [/INST]", True),
    ("anthropic_text", f"\n\nHuman: {U}\n\nAssistant:", False),
    ("alpaca", f"{S}\n\n### Instruction:\n{U}\n\n### Response:\n", True),
]


@pytest.mark.parametrize(("family", "text", "has_system"), FAMILIES, ids=[f[0] for f in FAMILIES])
def test_each_markup_family_is_parsed_back_into_the_messages_it_was_rendered_from(
    family: str, text: str, has_system: bool
) -> None:
    parsed = parse_rendered_prompt(text)
    assert parsed is not None and parsed.family == family and parsed.text == text
    expected = [{"role": "system", "content": S}] if has_system else []
    assert parsed.messages == [*expected, {"role": "user", "content": U}]


# volcengine/verl verl/trainer/ppo/ray_trainer.py (commit 00401103a8c8900774aba04b910de5b0af930b99) dumps rollouts as
# tokenizer.batch_decode(prompts, skip_special_tokens=True): the ChatML markup without its special tokens.
VERL_DECODED_ROW = {
    "input": f"system\n{S}\nuser\n{U} Let's think step by step.\nassistant\n",
    "output": "2+2 is 4.",
    "score": 1.0,
    "step": 1,
}


def test_a_rollout_prompt_decoded_without_its_special_tokens_is_read_as_its_messages_not_as_one_user_text(
    tmp_path: Path,
) -> None:
    path = _jsonl(tmp_path / "1.jsonl", [VERL_DECODED_ROW])
    assert _said(path) == [("system", S), ("user", f"{U} Let's think step by step."), ("assistant", "2+2 is 4.")]
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and stats.turns_trained == 1
    start = samples[0].turn_spans[0][0]
    decoded = VERL_DECODED_ROW["input"]
    rendered = "<|im_start|>" + decoded.replace("\nuser\n", "<|im_end|>\n<|im_start|>user\n").replace(
        "\nassistant\n", "<|im_end|>\n<|im_start|>assistant\n"
    )
    assert load_tokenizer(None, None).decode(samples[0].input_ids[:start].tolist()) == rendered


@pytest.mark.parametrize(
    "text",
    [
        "user\nhi\nuser\nassistant\n",  # decoded ChatML whose role lines do not alternate: a content line
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\nThe answer is",  # a prefill: the reply's start
        "user\n2+2?<|im_end|>\n<|im_start|>assistant\n",  # cut before its first turn
        "<|im_start|>user\n2+2?<|im_end|>\n",  # no generation prompt: where the reply went is not said
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>tool\n{}<|im_end|>\n<|im_start|>assistant\n",  # a tool turn
        "Please answer: 2+2?",
    ],
)
def test_text_that_is_not_unambiguously_a_rendered_prompt_is_not_parsed(text: str) -> None:
    assert parse_rendered_prompt(text) is None


# volcengine/verl verl/trainer/ppo/ray_trainer.py RayPPOTrainer._dump_generations (commit
# 3d9df73353a546a98235b38653c2c163efb51420): {input, output, gts, score, step}, the input the decoded prompt with its
# chat template, the output the decoded response with the stop token it ended on.
VERL_ROW = {
    "input": f"<|im_start|>system\n{S}<|im_end|>\n<|im_start|>user\n{U}<|im_end|>\n<|im_start|>assistant\n",
    "output": "4<|im_end|>",
    "gts": "4",
    "score": 1.0,
    "step": 3,
}


def test_a_rollout_whose_prompt_a_chat_template_rendered_is_trained_in_exactly_that_prompt(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "3.jsonl", [VERL_ROW])
    assert _said(path) == [("system", S), ("user", U), ("assistant", A)]  # the stop token is the template's to write
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and (stats.turns_found, stats.turns_trained) == (1, 1)
    tok = load_tokenizer(None, None)
    (sample,) = samples
    (start, end) = sample.turn_spans[0]
    assert tok.decode(sample.input_ids[:start].tolist()) == VERL_ROW["input"]
    assert tok.decode(sample.input_ids[start:end].tolist()) == "4<|im_end|>"
    assert sample.reward == 1.0 and "rendered_prompt_logged" not in sample.flags


# A ChatML template that trims what it renders (as Llama 3's and Mistral's do): the logged prompt, rendered by one
# that does not, holds spaces this template would drop.
TRIMMING = (
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content | trim + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def test_the_logged_prompt_text_is_the_context_where_this_template_renders_its_messages_differently(
    tmp_path: Path,
) -> None:
    template = tmp_path / "trimming.jinja"
    template.write_text(TRIMMING, encoding="utf-8")
    logged = f"<|im_start|>user\n  {U}  <|im_end|>\n<|im_start|>assistant\n"
    path = _jsonl(tmp_path / "rollouts.jsonl", [{"prompt": logged, "completion": "4<|im_end|>", "reward": 1.0}])
    samples, stats, rejects = convert_file(path, _settings(str(template)))
    assert rejects == [] and stats.turns_trained == 1
    tok = load_tokenizer(None, str(template))
    (sample,) = samples
    (start, end) = sample.turn_spans[0]
    assert tok.decode(sample.input_ids[:start].tolist()) == logged  # not "<|im_start|>user\n2+2?<|im_end|>..."
    assert tok.decode(sample.input_ids[start:end].tolist()) == "4<|im_end|>"
    assert "rendered_prompt_logged" in sample.flags


def test_a_prompt_in_another_models_markup_is_rendered_in_this_tokenizers_own_template(tmp_path: Path) -> None:
    # Llama 3 markup read with the demo (ChatML) tokenizer: the data feeds another model, so the messages are
    # rendered in its template, never the Llama 3 text as if it were content
    llama = next(text for family, text, _ in FAMILIES if family == "llama3")
    path = _jsonl(tmp_path / "rows.jsonl", [{"prompt": llama, "completion": "4<|eot_id|>"}])
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and stats.turns_trained == 1
    text = load_tokenizer(None, None).decode(samples[0].input_ids.tolist())
    assert "<|start_header_id|>" not in text and "<|eot_id|>" not in text
    assert text.startswith(f"<|im_start|>system\n{S}<|im_end|>\n<|im_start|>user\n{U}<|im_end|>")


# Dahoas/full-hh-rlhf rows (dataset card): {prompt, response, chosen, rejected}, the prompt Anthropic's
# "\n\nHuman: ...\n\nAssistant:" text of the conversation so far, the replies its continuations.
def test_hh_rlhf_prompt_text_is_the_conversation_the_preferred_reply_is_trained_after(tmp_path: Path) -> None:
    row = {
        "prompt": "\n\nHuman: Hi there.\n\nAssistant: Hello! How can I help?\n\nHuman: What is 2+2?\n\nAssistant:",
        "response": " 4",
        "chosen": " 4",
        "rejected": " 5",
    }
    path = _jsonl(tmp_path / "train.jsonl", [row])
    said = _said(path)
    assert said[:3] == [("user", "Hi there."), ("assistant", "Hello! How can I help?"), ("user", "What is 2+2?")]
    assert sorted(said[3:]) == [("assistant", " 4"), ("assistant", " 5")]
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and (stats.turns_found, stats.turns_trained) == (2, 1)
    assert samples[0].flags == ["preference_chosen"]


# EleutherAI/lm-evaluation-harness samples_<task>_<date>.jsonl with --apply_chat_template and a local model
# (lm_eval/loggers/evaluation_tracker.py, commit 034ab03621186e68aa1f73ee1508370580ea77b5): arg_0 is the rendered
# prompt.
def test_lm_eval_contexts_a_local_models_template_rendered_are_trained_after_their_messages(tmp_path: Path) -> None:
    rendered = f"<|im_start|>user\n{U}<|im_end|>\n<|im_start|>assistant\n"
    row = {
        "doc_id": 0,
        "doc": {"question": U},
        "target": "4",
        "arguments": {"gen_args_0": {"arg_0": rendered, "arg_1": {"until": ["<|im_end|>"], "do_sample": False}}},
        "resps": [["4", "four"]],
        "filtered_resps": ["4"],
        "filter": "strict-match",
        "metrics": ["exact_match"],
        "exact_match": 1.0,
    }
    path = _jsonl(tmp_path / "samples_gsm8k_2025-01-01T00-00-00.jsonl", [row])
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and stats.turns_trained == 2
    start = samples[0].turn_spans[0][0]
    assert load_tokenizer(None, None).decode(samples[0].input_ids[:start].tolist()) == rendered


# A /v1/completions call log in the calls format ({request, response}), the response as vLLM's OpenAI-compatible
# server returns a text completion (vllm-project/vllm vllm/entrypoints/openai/protocol.py CompletionResponse:
# choices[].text, finish_reason, usage; prompt_token_ids / token_ids on each choice with return_token_ids).
def _completion_call(prompt: str, text: str, **choice: Any) -> dict[str, Any]:
    return {
        "request": {"model": "Qwen/Qwen3-8B", "prompt": prompt, "max_tokens": 16, "temperature": 0.7},
        "response": {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 1752593576,
            "model": "Qwen/Qwen3-8B",
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "stop", **choice}],
            "usage": {"prompt_tokens": 21, "completion_tokens": 2, "total_tokens": 23},
        },
    }


def test_a_text_completion_call_whose_prompt_a_template_rendered_trains_its_reply_in_that_prompt(
    tmp_path: Path,
) -> None:
    prompt = VERL_ROW["input"]
    path = _jsonl(tmp_path / "calls.jsonl", [_completion_call(prompt, "4<|im_end|>")])
    assert _said(path) == [("system", S), ("user", U), ("assistant", A)]
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and stats.turns_trained == 1
    start = samples[0].turn_spans[0][0]
    assert load_tokenizer(None, None).decode(samples[0].input_ids[:start].tolist()) == prompt


def test_a_text_completion_s_logged_ids_are_its_tokens(tmp_path: Path) -> None:
    tok = load_tokenizer(None, None)
    prompt = VERL_ROW["input"]
    prompt_ids = tok.encode(prompt).tolist()
    reply_ids = tok.encode("4<|im_end|>").tolist()
    call = _completion_call(prompt, "4", prompt_token_ids=prompt_ids, token_ids=reply_ids)
    samples, _, rejects = convert_file(_jsonl(tmp_path / "calls.jsonl", [call]), _settings())
    assert rejects == [] and samples[0].input_ids.tolist() == prompt_ids + reply_ids
    assert samples[0].engine_tokens == len(prompt_ids) + len(reply_ids)


def test_a_text_completion_of_a_raw_prompt_is_a_counted_reject_not_a_chat(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "calls.jsonl", [_completion_call("Question: 2+2?\nAnswer:", " 4")])
    samples, stats, rejects = convert_file(path, _settings())
    assert samples == [] and stats.turns_lost == 1
    assert json.loads(rejects[0])["reason"] == "not_a_chat"
