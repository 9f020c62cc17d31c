"""Batch API files: a batch's output read with its input file, joined by custom_id
(msgtrain.ingest.formats.api.batch_files).

The fixtures are written here in the shape of real batch files (the data is not copied): OpenAI Batch input and
output lines as CheolheeLee0/go-batch batch_input.jsonl / batch_output.jsonl (commit
d8a254333cf7f5c588383ec7d5be65ec18d51295) hold them, and Anthropic Message Batches requests and results as
L3G5/impossible-bench batch_input_a.jsonl / batch_output_a.jsonl (commit e55a2438e2cec49c4febda3a65244e285f252f5f)
and Anthropic's "Retrieving batch results" documentation show them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject, ReadSkip
from msgtrain.ingest.detect import detect_format
from msgtrain.run.parts import LinearizeSettings, convert_file
from tests.graph_helpers import said

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def _settings() -> LinearizeSettings:
    return LinearizeSettings(
        tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
    )


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _events(path: Path) -> list[Any]:
    return list(read_events(detect_format(path), path))


def _openai_request(custom_id: str, question: str, url: str = "/v1/chat/completions") -> dict[str, Any]:
    body = {"model": "gpt-4o", "messages": [SYSTEM, {"role": "user", "content": question}], "max_tokens": 1000}
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def _openai_result(custom_id: str, answer: str, prompt_tokens: int = 20) -> dict[str, Any]:
    body = {
        "id": f"chatcmpl-{custom_id}",
        "object": "chat.completion",
        "created": 1737637031,
        "model": "gpt-4o-2024-08-06",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 10, "total_tokens": prompt_tokens + 10},
    }
    return {
        "id": f"batch_req_{custom_id}",
        "custom_id": custom_id,
        "response": {"status_code": 200, "request_id": "008ed1ec", "body": body},
        "error": None,
    }


def test_an_openai_batch_output_is_read_with_its_input_file_and_each_reply_is_trained_in_its_request(
    tmp_path: Path,
) -> None:
    _jsonl(
        tmp_path / "batch_input.jsonl",
        [_openai_request("request-3", "Hello world!"), _openai_request("request-4", "what is stock?")],
    )
    # results come back in any order: the join is by custom_id, never by line
    output = _jsonl(
        tmp_path / "batch_output.jsonl",
        [_openai_result("request-4", "Stock is a share of a company."), _openai_result("request-3", "Hello!")],
    )
    graphs = [e for e in _events(output) if isinstance(e, ReadGraph)]
    spoken = sorted(said(g) for g in graphs)
    assert spoken == [
        [
            ("system", SYSTEM["content"], "context"),
            ("user", "Hello world!", "context"),
            ("assistant", "Hello!", "sampled"),
        ],
        [
            ("system", SYSTEM["content"], "context"),
            ("user", "what is stock?", "context"),
            ("assistant", "Stock is a share of a company.", "sampled"),
        ],
    ]
    assert sorted(g.extras["custom_id"] for g in graphs) == ["request-3", "request-4"]
    samples, stats, rejects = convert_file(output, _settings())
    assert rejects == [] and (stats.turns_found, stats.turns_trained) == (2, 2) and len(samples) == 2


def test_the_input_file_of_an_answered_batch_is_counted_as_read_with_its_output_never_as_a_second_conversation(
    tmp_path: Path,
) -> None:
    inputs = _jsonl(tmp_path / "batchinput.jsonl", [_openai_request("a", "One?"), _openai_request("b", "Two?")])
    _jsonl(tmp_path / "batch_output.jsonl", [_openai_result("a", "One.")])
    events = _events(inputs)
    assert not [e for e in events if isinstance(e, ReadGraph | ReadReject)]
    assert sorted(e.reason for e in events if isinstance(e, ReadSkip)) == [
        "batch_request_answered",
        "batch_request_unanswered",
    ]


def test_a_batch_result_whose_request_is_in_no_input_file_is_a_counted_reject_that_says_where_to_put_the_input(
    tmp_path: Path,
) -> None:
    output = _jsonl(tmp_path / "batch_output.jsonl", [_openai_result("request-1", "Hello.")] * 2)
    samples, stats, rejects = convert_file(output, _settings())
    assert samples == [] and stats.turns_lost == 2
    reasons = [json.loads(r) for r in rejects]
    assert {r["reason"] for r in reasons} == {"batch_request_missing"}
    assert all("custom_id" in r["message"] and "batch input file" in r["hint"] for r in reasons)


def test_a_custom_id_two_input_files_hold_with_different_requests_is_never_joined_on_a_guess(tmp_path: Path) -> None:
    _jsonl(tmp_path / "batch_input.jsonl", [_openai_request("request-1", "Hello world!")])
    _jsonl(tmp_path / "batch_input_b.jsonl", [_openai_request("request-1", "Goodbye world!")])
    output = _jsonl(tmp_path / "batch_output.jsonl", [_openai_result("request-1", "Hello!")])
    (reject,) = [e for e in _events(output) if isinstance(e, ReadReject)]
    assert reject.error.code == "ambiguous_structure" and "batch_input_b.jsonl:1" in reject.error.message
    assert not [e for e in _events(output) if isinstance(e, ReadGraph)]


def test_failed_batch_requests_and_embedding_requests_are_skips_with_their_reason(tmp_path: Path) -> None:
    embedding = {
        "custom_id": "e",
        "method": "POST",
        "url": "/v1/embeddings",
        "body": {"model": "text-embedding-3-small", "input": "Hello world"},
    }
    _jsonl(tmp_path / "batch_input.jsonl", [_openai_request("ok", "Hi?"), _openai_request("bad", "Hi?"), embedding])
    failed = {
        "id": "batch_req_bad",
        "custom_id": "bad",
        "response": None,
        "error": {"code": "batch_expired", "message": "This request could not be executed before the window."},
    }
    embedded = {
        "id": "batch_req_e",
        "custom_id": "e",
        "response": {"status_code": 200, "body": {"object": "list", "data": [{"embedding": [0.1]}]}},
        "error": None,
    }
    output = _jsonl(tmp_path / "batch_output.jsonl", [_openai_result("ok", "Hello."), failed, embedded])
    events = _events(output)
    assert sorted(e.reason for e in events if isinstance(e, ReadSkip)) == ["error_response", "not_a_generation_call"]
    assert len([e for e in events if isinstance(e, ReadGraph)]) == 1


def test_anthropic_message_batch_results_are_joined_to_their_params_with_the_top_level_system_prompt(
    tmp_path: Path,
) -> None:
    params = {
        "model": "claude-3-7-sonnet-20250219",
        "max_tokens": 1024,
        "system": "You are terse.",
        "messages": [{"role": "user", "content": "Hello, world"}],
    }
    _jsonl(
        tmp_path / "requests.jsonl",
        [{"custom_id": "my-first-request", "params": params}, {"custom_id": "my-second-request", "params": params}],
    )
    message = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-3-7-sonnet-20250219",
        "content": [{"type": "text", "text": "Hello!"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 3},
    }
    errored = {  # as batch_output_a.jsonl logs a request the API refused
        "type": "errored",
        "error": {"type": "error", "error": {"type": "invalid_request_error", "message": "Unexpected role"}},
    }
    results = _jsonl(
        tmp_path / "results.jsonl",
        [
            {"custom_id": "my-first-request", "result": {"type": "succeeded", "message": message}},
            {"custom_id": "my-second-request", "result": errored},
        ],
    )
    events = _events(results)
    (graph,) = [e for e in events if isinstance(e, ReadGraph)]
    assert said(graph) == [
        ("system", "You are terse.", "context"),
        ("user", "Hello, world", "context"),
        ("assistant", "Hello!", "sampled"),
    ]
    assert [e.reason for e in events if isinstance(e, ReadSkip)] == ["error_response"]


def test_a_batch_of_text_completions_whose_prompts_a_template_rendered_is_joined_and_trained(tmp_path: Path) -> None:
    prompt = "<|im_start|>user\nHello world!<|im_end|>\n<|im_start|>assistant\n"
    request = {"custom_id": "c-1", "method": "POST", "url": "/v1/completions", "body": {"model": "m", "prompt": prompt}}
    body = {
        "object": "text_completion",
        "model": "m",
        "choices": [{"index": 0, "text": "Hi!", "finish_reason": "stop"}],
    }
    _jsonl(tmp_path / "batch_input.jsonl", [request])
    result = {"id": "batch_req_1", "custom_id": "c-1", "response": {"status_code": 200, "body": body}, "error": None}
    output = _jsonl(tmp_path / "batch_output.jsonl", [result])
    (graph,) = [e for e in _events(output) if isinstance(e, ReadGraph)]
    assert said(graph) == [("user", "Hello world!", "context"), ("assistant", "Hi!", "sampled")]


# Amazon Bedrock batch inference output (Bedrock user guide, "View the results of a batch inference job"): the input
# file's name with .out, one {recordId, modelInput, modelOutput} line per record, or {recordId, modelInput, error}.
def test_a_bedrock_batch_output_reads_each_record_as_the_invoke_model_call_it_holds(tmp_path: Path) -> None:
    model_input = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 1024,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]}],
    }
    output = {
        "id": "msg_bdrk_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-3-haiku-20240307",
        "content": [{"type": "text", "text": "4"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 14, "output_tokens": 5},
    }
    failed = {"recordId": "CALL0000002", "modelInput": model_input, "error": {"errorCode": 400, "errorMessage": "x"}}
    path = _jsonl(
        tmp_path / "records.jsonl.out",
        [{"recordId": "CALL0000001", "modelInput": model_input, "modelOutput": output}, failed],
    )
    events = _events(path)
    (graph,) = [e for e in events if isinstance(e, ReadGraph)]
    assert said(graph) == [
        ("system", "Be brief.", "context"),
        ("user", "What is 2+2?", "context"),
        ("assistant", "4", "sampled"),
    ]
    assert [e.reason for e in events if isinstance(e, ReadSkip)] == ["error_response"]


# Gemini Batch API files (ai.google.dev batch-mode guide): a JSONL of {key, request: GenerateContentRequest} uploaded,
# results {key, response: GenerateContentResponse} (or {key, error}).
def test_gemini_batch_results_are_joined_to_their_requests_by_key(tmp_path: Path) -> None:
    request = {"key": "request-1", "request": {"contents": [{"role": "user", "parts": [{"text": "Hi?"}]}]}}
    _jsonl(tmp_path / "batch_requests.jsonl", [request, {**request, "key": "request-2"}])
    response = {
        "candidates": [{"content": {"parts": [{"text": "Hello."}], "role": "model"}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 2},
        "modelVersion": "gemini-2.5-flash",
    }
    failed = {"key": "request-2", "error": {"code": 400, "message": "bad"}}
    results = _jsonl(tmp_path / "batch_results.jsonl", [{"key": "request-1", "response": response}, failed])
    events = _events(results)
    (graph,) = [e for e in events if isinstance(e, ReadGraph)]
    assert said(graph) == [("user", "Hi?", "context"), ("assistant", "Hello.", "sampled")]
    assert [e.reason for e in events if isinstance(e, ReadSkip)] == ["error_response"]


def test_an_input_file_is_scanned_once_whatever_the_number_of_results_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a batch holds up to 50,000 requests: finding each result's request by scanning the input file again would
    # read it 50,000 times; each request is found again by its offset
    from msgtrain.ingest.formats.api import batch_files

    inputs = _jsonl(tmp_path / "batch_input.jsonl", [_openai_request(f"r{i}", f"Q{i}?") for i in range(40)])
    output = _jsonl(tmp_path / "batch_output.jsonl", [_openai_result(f"r{i}", f"A{i}.") for i in range(40)])
    scans: list[Path] = []
    real = batch_files.iter_json_lines

    def counted(path: Path) -> Any:
        scans.append(Path(path))
        return real(path)

    monkeypatch.setattr(batch_files, "iter_json_lines", counted)
    assert len([e for e in _events(output) if isinstance(e, ReadGraph)]) == 40
    assert scans.count(inputs) <= 1
