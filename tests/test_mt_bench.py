"""MT-bench / Arena-Hard model answers read with their question file (msgtrain.ingest.formats.harnesses.mt_bench).

Fixtures are written here in the shape of real files (the data is not copied): FastChat's layout as
DeL-TaiseiOzaki/jmt-bench-code data/mt_bench/question.jsonl and data/mt_bench/model_answer/Qwen7_answer.jsonl (commit
db4ccc224a521204f3a897f47302983d444a33db) hold it; Arena-Hard v0.1 replies as ``{"content", "token_len"}`` as
lmarena/arena-hard-auto's gen_answer.py writes them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject, ReadSkip
from msgtrain.ingest.detect import detect_format
from msgtrain.run.parts import LinearizeSettings, convert_file
from tests.graph_helpers import said

QUESTIONS = [
    {"question_id": 1, "category": "coding", "turns": ["Write a Python word counter.", "Can you parallelize it?"]},
    {"question_id": 2, "category": "math", "turns": ["What is 12 * 12?", "And its square root?"]},
]


def _settings() -> LinearizeSettings:
    return LinearizeSettings(
        tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
    )


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _answer(question_id: Any, *choices: list[Any]) -> dict[str, Any]:
    return {
        "question_id": question_id,
        "answer_id": f"{question_id}-1736676795.97",
        "model_id": "Qwen7",
        "choices": [{"index": i, "turns": turns} for i, turns in enumerate(choices)],
        "tstamp": 1736676795.97,
    }


def _bench(tmp_path: Path, answers: list[dict[str, Any]], questions: list[Any] = QUESTIONS) -> Path:
    _jsonl(tmp_path / "mt_bench" / "question.jsonl", questions)
    return _jsonl(tmp_path / "mt_bench" / "model_answer" / "Qwen7.jsonl", answers)


def test_each_reply_is_trained_after_the_questions_and_replies_before_it_with_the_unlogged_system_prompt_flagged(
    tmp_path: Path,
) -> None:
    path = _bench(tmp_path, [_answer(2, ["144.", "12."])])
    (graph,) = [e for e in read_events(detect_format(path), path) if isinstance(e, ReadGraph)]
    assert said(graph) == [
        ("user", "What is 12 * 12?", "context"),
        ("assistant", "144.", "sampled"),
        ("user", "And its square root?", "context"),
        ("assistant", "12.", "sampled"),
    ]
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and (stats.turns_found, stats.turns_trained) == (2, 2)
    assert stats.flags["context_incomplete"] == len(samples)


def test_replies_whose_question_is_not_in_the_question_file_are_counted_lost_saying_where_it_was_looked_for(
    tmp_path: Path,
) -> None:
    path = _bench(tmp_path, [_answer(99, ["a", "b"])])
    samples, stats, rejects = convert_file(path, _settings())
    assert samples == [] and stats.turns_lost == 2
    (reject,) = [json.loads(r) for r in rejects]
    assert reject["reason"] == "batch_request_missing" and "question.jsonl" in reject["message"]


def test_a_failed_api_call_logged_as_error_stays_context_and_the_next_reply_is_still_trained(tmp_path: Path) -> None:
    path = _bench(tmp_path, [_answer(1, ["$ERROR$", "Use multiprocessing."])])
    (graph,) = [e for e in read_events(detect_format(path), path) if isinstance(e, ReadGraph)]
    assert [o for r, _, o in said(graph) if r == "assistant"] == ["carried", "sampled"]
    _, stats, _ = convert_file(path, _settings())
    assert stats.turns_trained == 1


def test_arena_hard_replies_and_several_choices_are_sibling_conversations_of_one_question(tmp_path: Path) -> None:
    questions = [{"question_id": "q-1", "cluster": "c", "category": "arena-hard-v0.1", "turns": [{"content": "Hi?"}]}]
    answer = _answer("q-1", [{"content": "Hello.", "token_len": 2}], [{"content": "Hi there.", "token_len": 3}])
    path = _bench(tmp_path, [answer], questions)
    _, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and (stats.turns_found, stats.turns_trained) == (2, 2)


def test_the_question_file_is_read_as_questions_that_hold_no_reply(tmp_path: Path) -> None:
    path = _bench(tmp_path, [_answer(1, ["a", "b"])]).parent.parent / "question.jsonl"
    events = list(read_events(detect_format(path), path))
    assert [e.reason for e in events if isinstance(e, ReadSkip)] == ["benchmark_question"] * 2
    assert not [e for e in events if isinstance(e, ReadGraph | ReadReject)]


# lm-sys/FastChat fastchat/llm_judge/common.py play_a_match_single (the judgment line gen_judgment.py appends):
# {question_id, model, judge: [judge model, prompt name], user_prompt, judgment, score, turn, tstamp}; the judge's
# system prompt is in judge_prompts.jsonl. DeL-TaiseiOzaki/jmt-bench-code data/mt_bench/model_judgment/
# Qwen7_judgment.jsonl (commit db4ccc224a521204f3a897f47302983d444a33db) writes the judgment without its prompt.
JUDGMENT = {
    "question_id": 81,
    "model": "Qwen7",
    "judge": ["gpt-4", "single-v1"],
    "user_prompt": "[Question]\nWrite a poem.\n\n[The Start of Assistant's Answer]\nRoses.\n[The End of Answer]",
    "judgment": "The answer is short. Rating: [[3]]",
    "score": 3,
    "turn": 1,
    "tstamp": 1736676802.77,
}


def test_a_judge_s_verdict_is_trained_after_its_prompt_with_the_judge_system_prompt_flagged_missing(
    tmp_path: Path,
) -> None:
    path = _jsonl(tmp_path / "model_judgment" / "gpt-4_single.jsonl", [JUDGMENT])
    samples, stats, rejects = convert_file(path, _settings())
    assert rejects == [] and stats.turns_trained == 1
    assert stats.flags["context_incomplete"] == 1 and samples[0].reward == 3


def test_a_verdict_logged_without_its_prompt_is_counted_lost(tmp_path: Path) -> None:
    row = {k: JUDGMENT[k] for k in ("question_id", "judgment", "tstamp")} | {"model_id": "Qwen7"}
    path = _jsonl(tmp_path / "model_judgment" / "Qwen7_judgment.jsonl", [row, row])
    samples, stats, _ = convert_file(path, _settings())
    assert samples == [] and stats.turns_lost == 2
