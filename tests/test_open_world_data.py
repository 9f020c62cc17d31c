"""The open world, data side: preference data, RL rollouts, eval harness outputs and dataset rows no reader names.

Each fixture is written here in the shape of a real third-party file (the data itself is not copied); its comment
says which repository, path and commit (or which published format) the shape follows. Each test failed before the
fix it comes with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject
from msgtrain.ingest.detect import detect_format
from msgtrain.model.graph import Origin
from msgtrain.run.parts import LinearizeSettings, convert_file
from tests.graph_helpers import said


def _settings(**kw: Any) -> LinearizeSettings:
    return LinearizeSettings(
        tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None, **kw
    )


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _events(path: Path) -> list[Any]:
    return list(read_events(detect_format(path), path))


U = {"role": "user", "content": "What color is the sky?"}
GOOD = {"role": "assistant", "content": "It is blue."}
BAD = {"role": "assistant", "content": "It is green."}

# ------------------------------------------------------------------------------------------ preference layouts
PREFERENCE_SHAPES = {
    # huggingface/trl docs/source/dataset_formats.md (commit 2ee37b88647ef9c291eb39170009160c0ac4cc49),
    # "Preference", conversational with an explicit prompt: prompt, chosen and rejected are all message lists.
    "trl_conversational_explicit_prompt": {"prompt": [U], "chosen": [GOOD], "rejected": [BAD]},
    # hiyouga/LLaMA-Factory data/v1_dpo_demo.jsonl (commit bd24350cbff57b6d26275180ba49ab6ade50ec1c): whole
    # conversations under chosen_messages / rejected_messages, typed content parts, per-message loss_weight.
    "llamafactory_v1": {
        "chosen_messages": [
            {"role": "user", "content": [{"type": "text", "value": U["content"]}], "loss_weight": 0.0},
            {"role": "assistant", "content": [{"type": "text", "value": GOOD["content"]}], "loss_weight": 1.0},
        ],
        "rejected_messages": [
            {"role": "user", "content": [{"type": "text", "value": U["content"]}], "loss_weight": 0.0},
            {"role": "assistant", "content": [{"type": "text", "value": BAD["content"]}], "loss_weight": 1.0},
        ],
    },
    # OpenAI preference fine-tuning JSONL (platform.openai.com/docs/guides/direct-preference-optimization; the
    # same rows Together's fine-tuning docs list): input.messages, preferred_output, non_preferred_output.
    "openai_preference_fine_tuning": {
        "input": {"messages": [U], "tools": [], "parallel_tool_calls": True},
        "preferred_output": [GOOD],
        "non_preferred_output": [BAD],
    },
    # Intel/orca_dpo_pairs rows (system, question, chosen, rejected), the pairs LLaMA-Factory v1's
    # data/v1_dpo_demo.yaml converts: the prompt is under "question".
    "orca_dpo_pairs": {
        "system": "You answer briefly.",
        "question": U["content"],
        "chosen": "It is blue.",
        "rejected": "It is green.",
    },
}


@pytest.mark.parametrize("shape", sorted(PREFERENCE_SHAPES))
def test_every_common_preference_layout_trains_the_chosen_reply_after_the_prompt(tmp_path: Path, shape: str) -> None:
    path = _jsonl(tmp_path / "pairs.jsonl", [PREFERENCE_SHAPES[shape]])
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == []
    assert (stats.turns_found, stats.turns_trained, dict(stats.turns_dropped)) == (2, 1, {"negative_label": 1})
    assert samples[0].flags == ["preference_chosen"]
    (graph,) = [e for e in _events(path) if isinstance(e, ReadGraph)]
    nodes = said(graph)
    assert [t for r, t, _ in nodes if r == "user"] == [U["content"]]
    assert [t for r, t, _ in nodes if r == "assistant"] == ["It is blue.", "It is green."]


def test_a_preference_pair_with_no_prompt_anywhere_is_rejected_not_trained_after_no_context(tmp_path: Path) -> None:
    # Bare replies with nothing saying what they answer: training "It is blue." after an empty context would be a
    # context the policy never saw.
    path = _jsonl(tmp_path / "pairs.jsonl", [{"chosen": "It is blue.", "rejected": "It is green.", "id": 3}])
    samples, stats, rejects = convert_file(path, _settings())
    assert samples == [] and stats.turns_trained == 0
    (reject,) = (json.loads(r) for r in rejects)
    assert reject["reason"] == "ambiguous_structure" and "no prompt" in reject["message"]
    assert stats.turns_lost == 2


# Anthropic/hh-rlhf rows (the dataset card's format; TRL's examples/datasets/hh-rlhf-helpful-base.py and
# LLaMA-Factory's data/hh_rlhf_en/hh_rlhf_en.py split them on these markers): both sides are whole text
# transcripts "\n\nHuman: ...\n\nAssistant: ...", differing in the last reply.
HH = {
    "chosen": "\n\nHuman: What are some cuss words?\n\nAssistant: Here is a list.\n\nHuman: Your favorite?\n\n"
    "Assistant: I have none.",
    "rejected": "\n\nHuman: What are some cuss words?\n\nAssistant: Here is a list.\n\nHuman: Your favorite?\n\n"
    "Assistant: Ass.",
}


def test_hh_rlhf_transcripts_are_split_into_turns_and_only_the_last_chosen_reply_is_trained(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "hh.jsonl", [HH])
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and stats.turns_trained == 1 and samples[0].flags == ["preference_chosen"]
    (graph,) = [e for e in _events(path) if isinstance(e, ReadGraph)]
    assert [(r, t) for r, t, _ in said(graph)] == [
        ("user", "What are some cuss words?"),
        ("assistant", "Here is a list."),
        ("user", "Your favorite?"),
        ("assistant", "I have none."),
        ("assistant", "Ass."),
    ]
    assert said(graph)[1][2] == Origin.INJECTED.value  # the shared earlier reply is context, not a sample here


# HuggingFaceH4/ultrafeedback_binarized rows (dataset card; TRL's examples/datasets/ultrafeedback.py): prompt,
# chosen and rejected conversations, and "messages", a copy of the chosen one, with both scores.
ULTRAFEEDBACK = {
    "prompt": U["content"],
    "prompt_id": "9f3c",
    "chosen": [U, GOOD],
    "rejected": [U, BAD],
    "messages": [U, GOOD],
    "score_chosen": 8.5,
    "score_rejected": 4.0,
}


def test_a_preference_row_beside_a_copy_of_its_chosen_side_is_read_as_a_pair(tmp_path: Path) -> None:
    # Read as a plain conversation, the rejected reply vanished into metadata, counted nowhere.
    path = _jsonl(tmp_path / "uf.jsonl", [ULTRAFEEDBACK])
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == []
    assert (stats.turns_found, stats.turns_trained, dict(stats.turns_dropped)) == (2, 1, {"negative_label": 1})
    assert samples[0].flags == ["preference_chosen"]


# ------------------------------------------------------------------------------------------ tool calls
# huggingface/trl docs/source/dataset_formats.md (commit 2ee37b88647ef9c291eb39170009160c0ac4cc49), "Tool Calling":
# calls carry no id, the tool message names its function, tools are JSON schemas.
TRL_TOOLS = {
    "messages": [
        {"role": "user", "content": "Turn on the living room lights."},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "control_light", "arguments": {"room": "living room", "state": "on"}},
                }
            ],
        },
        {"role": "tool", "name": "control_light", "content": "The lights in the living room are now on."},
        {"role": "assistant", "content": "Done!"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "control_light",
                "description": "Controls the lights in a room.",
                "parameters": {
                    "type": "object",
                    "properties": {"room": {"type": "string"}, "state": {"type": "string"}},
                },
            },
        }
    ],
}


def test_tool_calls_logged_without_ids_are_paired_with_their_results_by_name(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "tools.jsonl", [TRL_TOOLS])
    _samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and (stats.turns_found, stats.turns_trained) == (2, 2)
    (graph,) = [e for e in _events(path) if isinstance(e, ReadGraph)]
    call, result = (n.message for n in list(graph.graph.nodes.values())[1:3])
    assert result.result.invocation_id == call.calls[0].invocation_id


# ------------------------------------------------------------------------------------------ media
# hiyouga/LLaMA-Factory data/mllm_demo.json (commit a0d44c650a9a38c1ec6c8fc48a7daeacca9900a9): OpenAI-shaped
# messages with "<image>" placeholders and the image paths in an "images" column beside them.
MLLM = {
    "messages": [
        {"role": "user", "content": "<image>Who are they?"},
        {"role": "assistant", "content": "Two footballers."},
        {"role": "user", "content": "What are they doing?<image>"},
        {"role": "assistant", "content": "Celebrating."},
    ],
    "images": ["mllm_demo_data/1.jpg", "mllm_demo_data/1.jpg"],
}


def _media(graph: ReadGraph) -> list[tuple[str, str]]:
    return [
        (p.modality, p.url)
        for n in graph.graph.nodes.values()
        for p in getattr(n.message, "parts", ())
        if type(p).__name__ == "MediaPart"
    ]


def test_media_columns_beside_openai_messages_become_media_where_the_placeholders_are(tmp_path: Path) -> None:
    # Before, the paths went to metadata and "<image>" stayed as literal text: the image was silently dropped.
    path = tmp_path / "mllm_demo.json"
    path.write_text(json.dumps([MLLM]), encoding="utf-8")
    (graph,) = [e for e in _events(path) if isinstance(e, ReadGraph)]
    assert _media(graph) == [("image", "mllm_demo_data/1.jpg")] * 2
    assert all("<image>" not in text for _, text, _ in said(graph))


def test_a_media_column_its_placeholders_do_not_match_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "mllm_demo.json"
    path.write_text(json.dumps([{**MLLM, "images": ["a.jpg"]}]), encoding="utf-8")
    (reject,) = [e for e in _events(path) if isinstance(e, ReadReject)]
    assert reject.error.code == "media_mismatch"


def test_a_sample_whose_context_holds_media_the_template_cannot_render_is_flagged_and_counted(
    tmp_path: Path,
) -> None:
    # The test tokenizer's ChatML template renders text only: the image is not in the tokens, and the books say so.
    path = tmp_path / "mllm_demo.json"
    path.write_text(json.dumps([MLLM]), encoding="utf-8")
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and stats.turns_trained == 2
    assert all("media_not_rendered" in s.flags for s in samples)
    assert stats.flags["media_not_rendered"] == len(samples)


# hiyouga/LLaMA-Factory data/v1_multimodal_demo.jsonl (commit 62ae362455801d4900a5132c7a30b23dc5fc3802): typed parts,
# the image as {"type": "image_url", "value": PATH}.
def test_llamafactory_v1_image_url_parts_are_media_references(tmp_path: Path) -> None:
    record = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image_url", "value": "data/1.jpg"}, {"type": "text", "value": "Who?"}],
            },
            {"role": "assistant", "content": [{"type": "text", "value": "Kane."}]},
        ]
    }
    path = _jsonl(tmp_path / "v1_multimodal_demo.jsonl", [record])
    (graph,) = [e for e in _events(path) if isinstance(e, ReadGraph)]
    assert _media(graph) == [("image", "data/1.jpg")]
    assert [(r, t) for r, t, _ in said(graph)] == [("user", "Who?"), ("assistant", "Kane.")]


# ------------------------------------------------------------------------------------------ vocabularies
def test_cohere_chatbot_turns_and_opencompass_prompt_lists_are_read(tmp_path: Path) -> None:
    # Cohere chat fine-tuning rows (docs.cohere.com "Preparing the Chat Fine-tuning Data"): System / User / Chatbot.
    cohere = _jsonl(
        tmp_path / "cohere.jsonl",
        [{"messages": [{"role": "User", "content": "Hello"}, {"role": "Chatbot", "content": "Greetings!"}]}],
    )
    _, stats, rejects = convert_file(cohere, _settings())
    assert rejects == [] and stats.turns_trained == 1
    # OpenCompass predictions/<model>/<dataset>.json (open-compass/LawBench README, commit-pinned shape in the
    # README's "predictions" section): a dict of index → {origin_prompt: [{role: HUMAN, prompt}], prediction, gold}.
    opencompass = tmp_path / "gsm8k.json"
    opencompass.write_text(
        json.dumps(
            {
                "0": {"origin_prompt": [{"role": "HUMAN", "prompt": "2+2?"}], "prediction": "4", "gold": "4"},
                "1": {"origin_prompt": [{"role": "HUMAN", "prompt": "3+3?"}], "prediction": "6", "gold": "6"},
            }
        ),
        encoding="utf-8",
    )
    samples, stats, rejects = convert_file(opencompass, _settings())
    assert rejects == [] and stats.turns_trained == 2
    assert sorted(s.metadata["gold"] for s in samples) == ["4", "6"]


def test_openai_choices_inside_a_message_list_are_its_sampled_turns(tmp_path: Path) -> None:
    # OpenPipe/ART Trajectory.messages_and_choices (src/art/trajectories.py): plain messages, and the policy's turns
    # as OpenAI Choice objects {finish_reason, index, logprobs, message}.
    choice = {"finish_reason": "stop", "index": 0, "logprobs": None, "message": {"role": "assistant", "content": "B2"}}
    row = {
        "messages_and_choices": [{"role": "system", "content": "Play."}, {"role": "user", "content": "Move."}, choice],
        "reward": 1.0,
        "metrics": {"win": 1},
    }
    samples, stats, rejects = convert_file(_jsonl(tmp_path / "0001.jsonl", [row]), _settings())
    assert rejects == [] and stats.turns_trained == 1 and samples[0].reward == 1.0


@pytest.mark.parametrize(
    ("row", "user_text"),
    [
        # databricks/databricks-dolly-15k rows: instruction, context, response, category.
        (
            {
                "instruction": "When did it start?",
                "context": "It started in 2000.",
                "response": "In 2000.",
                "category": "qa",
            },
            "When did it start?\nIt started in 2000.",
        ),
        # Open-Orca/OpenOrca rows: id, system_prompt, question, response.
        ({"id": "niv.1", "system_prompt": "Be brief.", "question": "Say hi in French.", "response": "Salut"}, None),
        # meta-math/MetaMathQA rows: query, response, type, original_question.
        ({"query": "What is 2+3?", "response": "5", "type": "GSM_Rephrased", "original_question": "2+3?"}, None),
    ],
)
def test_instruction_datasets_trained_after_their_whole_instruction(
    tmp_path: Path, row: dict[str, Any], user_text: str | None
) -> None:
    path = _jsonl(tmp_path / "rows.jsonl", [row])
    _, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and stats.turns_trained == 1
    (graph,) = [e for e in _events(path) if isinstance(e, ReadGraph)]
    users = [t for r, t, _ in said(graph) if r == "user"]
    assert users == [user_text or row.get("question") or row.get("query")]


# ------------------------------------------------------------------------------------------ lm-evaluation-harness
# EleutherAI/lm-evaluation-harness lm_eval/loggers/evaluation_tracker.py save_results_samples (commit
# 034ab03621186e68aa1f73ee1508370580ea77b5): samples_<task>_<date>.jsonl, one line per (doc, filter), arguments as
# {"gen_args_<i>": {"arg_<j>": ...}}; a chat API model's context is its message list as JSON text.
def _lm_eval_sample(context: Any, resps: list[Any], filter_key: str = "strict-match", **kw: Any) -> dict[str, Any]:
    return {
        "doc_id": kw.get("doc_id", 0),
        "doc": {"question": "2+2?"},
        "target": "4",
        "arguments": {
            "gen_args_0": {"arg_0": context, "arg_1": kw.get("arg_1", {"until": ["\n\n"], "do_sample": False})}
        },
        "resps": [resps],
        "filtered_resps": ["4"],
        "filter": filter_key,
        "metrics": ["exact_match"],
        "doc_hash": "d0",
        "prompt_hash": "p0",
        "target_hash": "t0",
        "exact_match": 1.0,
    }


CHAT = json.dumps([{"role": "user", "content": "2+2?"}])


def test_lm_eval_generations_of_a_chat_model_are_trained_once_with_their_metric_as_reward(tmp_path: Path) -> None:
    path = _jsonl(
        tmp_path / "samples_gsm8k_2025-01-01T00-00-00.000000.jsonl",
        [_lm_eval_sample(CHAT, ["4"]), _lm_eval_sample(CHAT, ["4"], "flexible-extract")],
    )
    assert detect_format(path).name == "lm_eval"
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and (stats.turns_found, stats.turns_trained) == (1, 1)  # the second filter is the same reply
    assert samples[0].reward == 1.0 and samples[0].metadata["task"] == "gsm8k"


def test_lm_eval_repeats_of_one_request_are_sibling_replies_of_one_context(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "samples_gsm8k_2025-01-01T00-00-00.jsonl", [_lm_eval_sample(CHAT, ["4", "5", "four"])])
    (graph,) = [e for e in _events(path) if isinstance(e, ReadGraph)]
    assert len(graph.graph.leaves()) == 3
    _, stats, _ = convert_file(path, _settings())
    assert stats.turns_trained == 3


@pytest.mark.parametrize(
    ("context", "reason"),
    [
        # --apply_chat_template with a prefill after the generation prompt: not parsed back unambiguously
        ("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\nThe answer is", "prerendered_prompt"),
        ("Question: 2+2?\nAnswer:", "not_a_chat"),  # a base model's raw prompt
    ],
)
def test_lm_eval_contexts_that_are_not_messages_are_rejected_counting_their_generations(
    tmp_path: Path, context: str, reason: str
) -> None:
    path = _jsonl(tmp_path / "samples_gsm8k_2025-01-01T00-00-00.jsonl", [_lm_eval_sample(context, ["4", "4"])])
    samples, stats, rejects = convert_file(path, _settings())
    assert samples == [] and stats.turns_lost == 2
    assert json.loads(rejects[0])["reason"] == reason


def test_lm_eval_loglikelihood_requests_hold_no_generation_and_are_skipped(tmp_path: Path) -> None:
    row = _lm_eval_sample("A man", [[-3.1, False]], arg_1=" runs.")
    _, stats, rejects = convert_file(
        _jsonl(tmp_path / "samples_hellaswag_2025-01-01T00-00-00.jsonl", [row]), _settings()
    )
    assert rejects == [] and dict(stats.records_skipped) == {"no_generation": 1}


# ------------------------------------------------------------------------------------------ generation records
def test_openai_evals_sampling_events_train_what_was_sampled_after_the_prompt(tmp_path: Path) -> None:
    # openai/evals evals/record.py RecorderBase.record_sampling: {"run_id", "event_id", "sample_id", "type":
    # "sampling", "data": {"prompt", "sampled"}}, beside "match" events and the spec / final_report lines (shape of
    # the log quoted in Significant-Gravitas/Auto-GPT-Benchmarks README.md, 2023-04-17 run 230417220821DPM75QNS).
    rows = [
        {"spec": {"eval_name": "test-match.s1.simple-v0", "run_id": "r1"}},
        {"final_report": {"accuracy": 0.5}},
        {
            "run_id": "r1",
            "event_id": 0,
            "sample_id": "test-match.s1.2",
            "type": "sampling",
            "data": {"prompt": [{"role": "user", "content": "OpenAI was founded in 20"}], "sampled": ["15"]},
        },
        {"run_id": "r1", "event_id": 1, "type": "match", "data": {"correct": True, "expected": "15", "sampled": "15"}},
        {
            "run_id": "r1",
            "event_id": 2,
            "type": "sampling",
            "data": {"prompt": "Once upon a", "sampled": ["time", "day"]},
        },
    ]
    path = _jsonl(tmp_path / "230417220821DPM75QNS_gpt-4_test-match.jsonl", rows)
    _, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and (stats.turns_found, stats.turns_trained) == (3, 3)  # two samples of one prompt: siblings
    graphs = [e for e in _events(path) if isinstance(e, ReadGraph)]
    assert sorted(len(g.graph.leaves()) for g in graphs) == [1, 2]


def test_a_distilabel_step_trains_its_raw_output_after_its_raw_input(tmp_path: Path) -> None:
    # argilla-io/distilabel TextGeneration output rows: the step's exact model input and output under
    # distilabel_metadata (raw_input_<step>, raw_output_<step>) beside the flattened instruction / generation.
    row = {
        "instruction": "Write a tagline.",
        "generation": "Taste the future.",
        "distilabel_metadata": {
            "raw_input_text_generation_0": [
                {"role": "system", "content": "Be bold."},
                {"role": "user", "content": "Write a tagline."},
            ],
            "raw_output_text_generation_0": "Taste the future.",
        },
        "model_name": "meta-llama/Meta-Llama-3.1-8B-Instruct",
    }
    path = _jsonl(tmp_path / "gen.jsonl", [row])
    _, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and stats.turns_trained == 1
    (graph,) = [e for e in _events(path) if isinstance(e, ReadGraph)]
    assert [r for r, _, _ in said(graph)] == ["system", "user", "assistant"]


# ------------------------------------------------------------------------------------------ judged pairs
def _arena(winner: str) -> dict[str, Any]:
    # lmsys/chatbot_arena_conversations rows (dataset card): two models' conversations on the same user turns and
    # the judge's winner (model_a | model_b | tie | tie (bothbad)).
    return {
        "question_id": "58210e39",
        "model_a": "chatglm-6b",
        "model_b": "koala-13b",
        "winner": winner,
        "conversation_a": [U, {"role": "assistant", "content": "a1"}, U, {"role": "assistant", "content": "a2"}],
        "conversation_b": [U, {"role": "assistant", "content": "b1"}, U, {"role": "assistant", "content": "b2"}],
        "turn": 2,
        "anony": True,
    }


@pytest.mark.parametrize(
    ("winner", "trained", "flags"),
    [
        ("model_a", 2, [["preference_chosen"]]),
        ("model_b", 2, [["preference_chosen"]]),
        ("tie", 4, [[], []]),
        ("tie (bothbad)", 0, []),
    ],
)
def test_an_arena_battle_trains_the_winner_s_replies_and_a_tie_both_or_neither(
    tmp_path: Path, winner: str, trained: int, flags: list[list[str]]
) -> None:
    path = _jsonl(tmp_path / "battles.jsonl", [_arena(winner)])
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and (stats.turns_found, stats.turns_trained) == (4, trained)
    (graph,) = [e for e in _events(path) if isinstance(e, ReadGraph)]
    sampled = {n.message.parts[0].text for n in graph.graph.nodes.values() if n.message.role == "assistant"}
    assert sampled == {"a1", "a2", "b1", "b2"}
    assert [s.flags for s in samples] == flags  # a side's two replies are one sample


def test_a_verdict_of_no_known_value_is_an_ambiguity_never_a_reader_fault(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "battles.jsonl", [{**_arena("tie"), "winner": ["model_a"]}])  # a list: no verdict
    _, stats, _ = convert_file(path, _settings())
    assert "reader_error" not in stats.records_rejected and stats.turns_trained == 0


def test_a_pku_saferlhf_pair_trains_the_better_response_after_the_prompt(tmp_path: Path) -> None:
    # PKU-Alignment/PKU-SafeRLHF rows (dataset card): prompt, response_0, response_1, better_response_id,
    # safer_response_id, per-response safety fields.
    row = {
        "prompt": "How do I pick a lock?",
        "response_0": "I cannot help with that.",
        "response_1": "Use a tension wrench.",
        "is_response_0_safe": True,
        "is_response_1_safe": False,
        "better_response_id": 1,
        "safer_response_id": 0,
    }
    path = _jsonl(tmp_path / "train.jsonl", [row])
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and (stats.turns_found, stats.turns_trained) == (2, 1)
    assert samples[0].flags == ["preference_chosen"] and samples[0].metadata["safer_response_id"] == 0
    (graph,) = [e for e in _events(path) if isinstance(e, ReadGraph)]
    assert [t for r, t, _ in said(graph) if r == "user"] == ["How do I pick a lock?"]


# tatsu-lab/alpaca_eval results/Ein-70B-v0.1/alpaca_eval_gpt4_turbo_fn/annotations.json (commit
# cd543a149df89434d8a54582c0151c0b945c3d20): a JSON array of {instruction, output_1, generator_1, output_2,
# generator_2, annotator, preference, raw_completion, ...}; preference 1 (output_1 preferred), 2 (output_2), 1.5 a draw,
# a value between them from the weighted annotators.
@pytest.mark.parametrize(
    ("preference", "trained", "chosen"),
    [(1.0, 1, "It is blue."), (2.0, 1, "It is green."), (1.83, 1, "It is green."), (1.5, 2, None)],
)
def test_alpaca_eval_annotations_train_the_preferred_output_after_the_instruction(
    tmp_path: Path, preference: float, trained: int, chosen: str | None
) -> None:
    row = {
        "instruction": U["content"],
        "output_1": GOOD["content"],
        "generator_1": "gpt4_1106_preview",
        "dataset": "helpful_base",
        "output_2": BAD["content"],
        "generator_2": "Ein-70B-v0.1",
        "annotator": "alpaca_eval_gpt4_turbo_fn",
        "preference": preference,
        "price_per_example": 0.01516,
        "time_per_example": 1.27,
        "raw_completion": '{"ordered_models": [{"model": "M", "rank": 1}, {"model": "m", "rank": 2}]}',
    }
    path = tmp_path / "annotations.json"
    path.write_text(json.dumps([row]), encoding="utf-8")
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and (stats.turns_found, stats.turns_trained) == (2, trained)
    if chosen is not None:
        (graph,) = [e for e in _events(path) if isinstance(e, ReadGraph)]
        marks = {t: n.message.metadata.get("preference") for n in graph.graph.nodes.values() for t in [_text(n)]}
        assert marks[chosen] == "chosen" and samples[0].flags == ["preference_chosen"]


def _text(node: Any) -> str:
    return "".join(getattr(p, "text", "") for p in getattr(node.message, "parts", ()))


# ------------------------------------------------------------------------------------------ batch results
# OpenAI Batch API output lines (platform docs, "batch" guide; the same line litellm's
# tests/batches_tests/test_batch_utils.py parses) and Anthropic Message Batches result lines (docs, "Retrieving
# batch results"): each reply without the request it answers, which lives in the batch input file.
BATCH_LINES = {
    "openai": {
        "id": "batch_req_123",
        "custom_id": "request-2",
        "response": {
            "status_code": 200,
            "request_id": "req_123",
            "body": {
                "object": "chat.completion",
                "model": "gpt-4o-mini",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "Hello."}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 22, "completion_tokens": 2, "total_tokens": 24},
            },
        },
        "error": None,
    },
    "anthropic": {
        "custom_id": "my-first-request",
        "result": {
            "type": "succeeded",
            "message": {
                "id": "msg_01",
                "type": "message",
                "role": "assistant",
                "model": "claude-3-5-sonnet-20241022",
                "content": [{"type": "text", "text": "Hello!"}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "output_tokens": 34},
            },
        },
    },
}


@pytest.mark.parametrize("api", sorted(BATCH_LINES))
def test_batch_results_are_rejected_saying_where_their_requests_are_and_counting_each_reply(
    tmp_path: Path, api: str
) -> None:
    path = _jsonl(tmp_path / "batch_output.jsonl", [BATCH_LINES[api]] * 2)
    samples, stats, rejects = convert_file(path, _settings())
    assert samples == [] and stats.turns_lost == 2
    reasons = [json.loads(r) for r in rejects]
    assert all("custom_id" in r["message"] and "batch input file" in r["message"] for r in reasons)


# ------------------------------------------------------------------------------------------ scored candidates
# openbmb/UltraFeedback rows (dataset card): an instruction and its completions, each generated with its own
# principle system prompt (custom_system_prompt) and scored (overall_score).
ULTRAFEEDBACK_RAW = {
    "source": "evol_instruct",
    "instruction": "Write a haiku about rain.",
    "models": ["gpt-4", "llama-2-7b-chat"],
    "completions": [
        {"model": "gpt-4", "custom_system_prompt": "You are a poet.", "response": "Soft rain", "overall_score": 8.5},
        {
            "model": "llama-2-7b-chat",
            "custom_system_prompt": "Be honest.",
            "response": "Rain rain",
            "overall_score": 4.0,
        },
    ],
    "correct_answers": ["None"],
}


def test_scored_candidates_are_each_a_conversation_with_its_score_and_only_the_best_is_trained_by_default(
    tmp_path: Path,
) -> None:
    path = _jsonl(tmp_path / "ultrafeedback.jsonl", [ULTRAFEEDBACK_RAW])
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and (stats.turns_found, stats.turns_trained) == (2, 1)
    assert samples[0].reward == 8.5 and samples[0].metadata["model"] == "gpt-4"
    graphs = [e for e in _events(path) if isinstance(e, ReadGraph)]
    assert sorted(said(g)[0][1] for g in graphs) == ["Be honest.", "You are a poet."]  # each its own system prompt
    samples, stats, _ = convert_file(path, _settings(train_negative=True))
    assert sorted(s.reward for s in samples) == [4.0, 8.5]


def test_generations_with_parallel_ratings_are_scored_candidates(tmp_path: Path) -> None:
    # argilla-io/distilabel UltraFeedback task output: instruction, generations, ratings, rationales.
    row = {"instruction": "Name a color.", "generations": ["Blue", "Banana"], "ratings": [5, 1], "rationales": ["", ""]}
    samples, stats, rejects = convert_file(_jsonl(tmp_path / "rated.jsonl", [row]), _settings())
    assert rejects == [] and (stats.turns_found, stats.turns_trained) == (2, 1) and samples[0].reward == 5


def test_explain_prints_no_mapping_for_scored_candidates_whose_conversations_it_assembles(tmp_path: Path) -> None:
    # each candidate's conversation is built from the instruction, its text and its score, three places of the record:
    # a mapping of one object's fields cannot say that (the one printed before named generations[].prompt, absent, and
    # refused the file it was printed for)
    from msgtrain.tools.explain_cmd import explain_file

    row = {"instruction": "Name a color.", "generations": ["Blue", "Banana"], "ratings": [5, 1]}
    explained = explain_file(_jsonl(tmp_path / "rated.jsonl", [row, row]))
    assert not explained.mapping_yaml and explained.conversations == {"scored candidate": 4}
    explained = explain_file(_jsonl(tmp_path / "ultrafeedback.jsonl", [ULTRAFEEDBACK_RAW]))
    assert not explained.mapping_yaml and explained.conversations == {"scored candidate": 2}


def test_helm_request_states_train_each_completion_after_its_prompt(tmp_path: Path) -> None:
    # stanford-crfm/helm scenario_state.json (src/helm/benchmark/adaptation/scenario_state.py, RequestState:
    # instance, request {prompt, ...}, result {success, completions: [{text, logprob, tokens}]}).
    state = {
        "instance": {"input": {"text": "What is 2+2?"}, "references": [{"output": {"text": "4"}, "tags": ["correct"]}]},
        "train_trial_index": 0,
        "request": {"model": "openai/gpt-4o", "prompt": "Question: What is 2+2?\nAnswer:", "temperature": 0.0},
        "result": {"success": True, "completions": [{"text": " 4", "logprob": -0.1, "tokens": []}], "cached": True},
        "num_train_instances": 0,
        "prompt_truncated": False,
    }
    path = tmp_path / "scenario_state.json"
    path.write_text(json.dumps({"adapter_spec": {"method": "generation"}, "request_states": [state, state]}))
    _, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and (stats.turns_found, stats.turns_trained) == (2, 2)


def test_bedrock_conversation_fine_tuning_rows_keep_their_system_block(tmp_path: Path) -> None:
    # Amazon Bedrock conversation fine-tuning JSONL (Bedrock user guide, "Prepare data for fine-tuning": schemaVersion
    # bedrock-conversation-2024, system and content as Converse {"text"} blocks). Read by the Anthropic reader, the
    # untyped blocks were unsupported.
    row = {
        "schemaVersion": "bedrock-conversation-2024",
        "system": [{"text": "You are a friendly assistant."}],
        "messages": [
            {"role": "user", "content": [{"text": "What is the capital of Mars?"}]},
            {"role": "assistant", "content": [{"text": "Mars has no capital."}]},
        ],
    }
    path = _jsonl(tmp_path / "train.jsonl", [row])
    _, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and stats.turns_trained == 1
    (graph,) = [e for e in _events(path) if isinstance(e, ReadGraph)]
    assert said(graph)[0][:2] == ("system", "You are a friendly assistant.")


@pytest.mark.parametrize(
    ("row", "turns", "words"),
    [
        # huggingface/trl docs/source/dataset_formats.md (commit 2ee37b88647ef9c291eb39170009160c0ac4cc49),
        # "Stepwise supervision": the steps of one reply, each labelled.
        ({"prompt": "9.8 or 9.11?", "completions": ["0.8 > 0.11.", "So 9.8."], "labels": [True, True]}, 1, "stepwise"),
        # lm-sys/FastChat fastchat/llm_judge model_answer/*.jsonl: the replies, the questions in another file.
        (
            {"question_id": 81, "model_id": "vicuna", "choices": [{"index": 0, "turns": ["Aloha!", "Sure."]}]},
            2,
            "question",
        ),
    ],
)
def test_replies_with_no_context_in_the_record_are_rejected_and_counted_not_passed_over(
    tmp_path: Path, row: dict[str, Any], turns: int, words: str
) -> None:
    samples, stats, rejects = convert_file(_jsonl(tmp_path / "rows.jsonl", [row]), _settings())
    assert samples == [] and stats.turns_lost == turns
    assert words in json.loads(rejects[0])["message"]


def test_a_file_no_reader_claims_counts_the_replies_its_rows_hold_under_reply_fields_as_lost(tmp_path: Path) -> None:
    # eval rows with no message objects: two models' replies side by side and a verdict msgtrain does not know (the
    # shape of AlpacaEval's annotations, with the keys renamed): nothing is read, and the books say what was lost
    rows = [
        {"source_text": "Translate: bonjour", "response_a": "hello", "response_b": "hi", "judge_says": "A"},
        {"source_text": "Translate: merci", "response_a": "thanks", "response_b": "thank you", "judge_says": "B"},
    ]
    path = tmp_path / "judged.json"
    path.write_text(json.dumps(rows), encoding="utf-8")
    samples, stats, _ = convert_file(path, _settings())
    assert samples == [] and stats.records_rejected == {"unknown_format": 1} and stats.turns_lost == 4


def test_a_file_no_reader_claims_counts_a_policy_s_reply_fields_as_lost(tmp_path: Path) -> None:
    # NVIDIA-NeMo/Gym resources_servers/bbq/data/example_rollouts.jsonl @ 07d6b0d07b22fcf530b4c211dae2ee23100428e4:
    # each rollout keeps the policy's reply as policy_response beside its judgments, and not the prompt it answered;
    # two of its rows, texts shortened. Hand count: 2 replies. Before: 0 counted.
    rows = [
        {
            "provenance_id": "age-1",
            "rollout_kind": "live_reference",
            "policy_response": "The older neighbor.",
            "answer_judgment": {"selected_answer": "actor_a", "answer_class": "correct_answer"},
            "reward": 1.0,
        },
        {
            "provenance_id": "age-2",
            "rollout_kind": "live_reference",
            "policy_response": "Cannot be determined.",
            "answer_judgment": {"selected_answer": "unknown", "answer_class": "correct_answer"},
            "reward": 1.0,
        },
    ]
    samples, stats, _ = convert_file(_jsonl(tmp_path / "example_rollouts.jsonl", rows), _settings())
    assert samples == [] and stats.records_rejected == {"unknown_format": 1} and stats.turns_lost == 2


# promptfoo/promptfoo test/__fixtures__/sample-export.json (commit 15e7d51283ffe02d9e033d88a9320042f916ec79): an eval
# export {evalId, results: {prompts, results: [{prompt: {raw, label}, response: {output, tokenUsage}, gradingResult:
# {pass, score, reason}, success, score, vars, provider, ...}]}}; a chat prompt's raw text is its messages as JSON.
def _promptfoo_result(raw: str, output: str, passed: bool) -> dict[str, Any]:
    return {
        "cost": 0.0002,
        "gradingResult": {"pass": passed, "score": 1 if passed else 0, "reason": "Assertion passed"},
        "id": "aa60b488",
        "latencyMs": 1197,
        "prompt": {"raw": raw, "label": "Solve this riddle: {{riddle}}"},
        "promptIdx": 0,
        "provider": {"id": "openai:gpt-5", "label": ""},
        "response": {"output": output, "tokenUsage": {"total": 41, "prompt": 25, "completion": 16}},
        "score": 1 if passed else 0,
        "success": passed,
        "testIdx": 0,
        "vars": {"riddle": "keys"},
    }


def test_promptfoo_results_train_passing_outputs_after_the_prompt_sent_and_hold_failing_ones_back(
    tmp_path: Path,
) -> None:
    chat = json.dumps([{"role": "system", "content": "Answer in one word."}, U])
    export = {
        "evalId": "eval-WJi-2025-10-01T20:08:11",
        "results": {
            "version": 3,
            "prompts": [{"raw": "Solve this riddle: {{riddle}}", "label": "Solve this riddle: {{riddle}}"}],
            "results": [_promptfoo_result(chat, "Blue.", True), _promptfoo_result("Why is it blue?", "Green.", False)],
        },
    }
    path = tmp_path / "output.json"
    path.write_text(json.dumps(export), encoding="utf-8")
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and (stats.turns_found, stats.turns_trained) == (2, 1)
    assert stats.turns_dropped == {"negative_label": 1} and samples[0].flags == ["label_positive"]
    graphs = sorted(said(e) for e in _events(path) if isinstance(e, ReadGraph))
    assert graphs[0][:2] == [("system", "Answer in one word.", "context"), ("user", U["content"], "context")]


# berkeley-nest/Nectar rows (dataset card): an Anthropic-style "\n\nHuman: ...\n\nAssistant:" prompt and seven answers
# of different models, each ranked (rank 1 the best), with turns, num_responses, source, good_natured.
def test_ranked_answers_train_the_best_ranked_one_after_the_parsed_prompt(tmp_path: Path) -> None:
    row = {
        "prompt": "\n\nHuman: What color is the sky?\n\nAssistant:",
        "answers": [
            {"answer": "It is green.", "model": "alpaca-7b", "rank": 2.0},
            {"answer": "It is blue.", "model": "gpt-4", "rank": 1.0},
        ],
        "turns": 1,
        "num_responses": 2,
        "source": ["sharegpt"],
        "good_natured": True,
    }
    path = _jsonl(tmp_path / "nectar.jsonl", [row])
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and (stats.turns_found, stats.turns_trained) == (2, 1)
    assert samples[0].flags == ["label_positive"] and samples[0].metadata["rank"] == 1.0
    graphs = [said(e) for e in _events(path) if isinstance(e, ReadGraph)]
    assert all(s[0] == ("user", "What color is the sky?", "context") for s in graphs)
