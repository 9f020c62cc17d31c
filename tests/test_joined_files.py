"""Files that answer each other: a reader that joins its input with other files declares them (its *partners*,
:mod:`msgtrain.ingest.core.files`), their bytes are in the part's key, and ``--resume`` after changing either side gives
the bytes of a clean run, converting again exactly the parts that used the changed file. A folder's batch index is
built once per run, on the disk and on an object store.

Fixtures are written here in the shapes of tests/test_batch_files.py and tests/test_mt_bench.py (their provenance is
noted there); no data is copied.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path, PurePosixPath
from typing import Any

import pyarrow.parquet as pq
import pytest

from msgtrain.ingest.core.files import LocalFiles, SharedIndex
from msgtrain.ingest.formats.api import batch_files
from msgtrain.ingest.registry import declared_partners
from msgtrain.linearize import load_tokenizer
from msgtrain.run import pipeline
from msgtrain.run.config import ConvertConfig
from tests.conftest import SAMPLE_LOGS

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------- batch files of each kind
def _openai(custom_id: str, question: str, answer: str) -> tuple[dict[str, Any], dict[str, Any]]:
    body = {"model": "gpt-4o", "messages": [SYSTEM, {"role": "user", "content": question}]}
    request = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}
    reply = {
        "id": f"chatcmpl-{custom_id}",
        "object": "chat.completion",
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
    }
    result = {"id": f"batch_req_{custom_id}", "custom_id": custom_id, "response": {"status_code": 200, "body": reply}}
    return request, result


def _anthropic(custom_id: str, question: str, answer: str) -> tuple[dict[str, Any], dict[str, Any]]:
    params = {"model": "claude-3-7-sonnet-20250219", "max_tokens": 1024, "system": "You are terse."}
    request = {"custom_id": custom_id, "params": {**params, "messages": [{"role": "user", "content": question}]}}
    message = {
        "id": f"msg_{custom_id}",
        "type": "message",
        "role": "assistant",
        "model": "claude-3-7-sonnet-20250219",
        "content": [{"type": "text", "text": answer}],
        "stop_reason": "end_turn",
    }
    return request, {"custom_id": custom_id, "result": {"type": "succeeded", "message": message}}


def _gemini(key: str, question: str, answer: str) -> tuple[dict[str, Any], dict[str, Any]]:
    request = {"key": key, "request": {"contents": [{"role": "user", "parts": [{"text": question}]}]}}
    response = {
        "candidates": [{"content": {"role": "model", "parts": [{"text": answer}]}, "finishReason": "STOP"}],
        "modelVersion": "gemini-2.5-flash",
    }
    return request, {"key": key, "response": response}


KINDS = {"openai": _openai, "anthropic": _anthropic, "gemini": _gemini}


def _batch(folder: Path, kind: str, name: str, questions: list[str]) -> tuple[Path, Path]:
    """One batch job: its input file and its output file, in ``folder``."""
    lines = [KINDS[kind](f"{name}-{i}", q, f"Answer to {q}") for i, q in enumerate(questions)]
    inputs = _jsonl(folder / f"{name}_input.jsonl", [request for request, _ in lines])
    outputs = _jsonl(folder / f"{name}_output.jsonl", [result for _, result in lines])
    return inputs, outputs


def _convert(logs: Path | str, out: Path, resume: bool, workers: int = 1) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The report and every published file's bytes."""
    report = pipeline.convert(ConvertConfig(inputs=(logs,), output=out, resume=resume, workers=workers, quiet=True))
    return report, {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _rows_text(out: Path) -> str:
    """Every published sample's tokens, decoded (to find a request's words in the samples)."""
    tok = load_tokenizer(None, None)  # the run's default (the embedded demo tokenizer)
    rows = [row for f in sorted((out / "data").glob("*.parquet")) for row in pq.read_table(f).to_pylist()]
    return "\n".join(tok.decode(row["input_ids"]) for row in rows)


def _resumed_and_clean(logs: Path | str, tmp_path: Path, step: str) -> tuple[dict[str, Any], dict[str, bytes]]:
    """A resumed run after ``step`` (asserted to give a clean run's bytes) and its report."""
    report, resumed = _convert(logs, tmp_path / "out", resume=True)
    shutil.rmtree(tmp_path / "clean", ignore_errors=True)
    _, clean = _convert(logs, tmp_path / "clean" / "out", resume=False)
    assert resumed.keys() == clean.keys(), step
    for name, data in clean.items():
        assert resumed[name] == data, f"{name} differs from a clean run after {step}"
    return report, resumed


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_batch_output_and_input_declare_each_other_and_nothing_else(tmp_path: Path, kind: str) -> None:
    a_in, a_out = _batch(tmp_path, kind, "a", ["Q1?", "Q2?"])
    b_in, b_out = _batch(tmp_path, kind, "b", ["Q3?"])
    _jsonl(tmp_path / "notes.jsonl", [{"note": "not a batch file"}])

    def partners(p: Path) -> list[PurePosixPath]:
        return declared_partners(PurePosixPath(p.as_posix()), LocalFiles())

    as_locations = [PurePosixPath(p.as_posix()) for p in (a_in, b_in)]
    assert partners(a_out) == partners(b_out) == as_locations  # results are looked up in every input file
    assert partners(a_in) == [PurePosixPath(p.as_posix()) for p in (a_out, b_out)]  # which requests were answered
    assert partners(tmp_path / "notes.jsonl") == []


def test_a_bedrock_batch_output_holds_its_requests_and_declares_no_partner(tmp_path: Path) -> None:
    record = {
        "recordId": "r1",
        "modelInput": {"anthropic_version": "bedrock-2023-05-31", "messages": [{"role": "user", "content": "Hi"}]},
        "modelOutput": {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
    }
    output = _jsonl(tmp_path / "batch.jsonl", [record])
    _batch(tmp_path, "openai", "a", ["Q1?"])
    assert declared_partners(PurePosixPath(output.as_posix()), LocalFiles()) == []


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_resume_after_changing_only_a_batch_input_file_gives_a_clean_run_and_reuses_the_parts_that_did_not_use_it(
    tmp_path: Path, kind: str
) -> None:
    logs = tmp_path / "logs"
    a_in, _ = _batch(logs, kind, "a", ["What is 2+2?", "Name a colour."])
    _batch(logs, kind, "b", ["Name a fruit."])
    first, _ = _convert(logs, tmp_path / "out", resume=True)
    assert first["samples"]["written"] == 3

    # A corrected input file (same custom_ids, one request reworded): the results now answer the new request.
    a_in.write_text(a_in.read_text(encoding="utf-8").replace("What is 2+2?", "What is 3+3?"), encoding="utf-8")
    report, _ = _resumed_and_clean(logs, tmp_path, "changing a batch input file")
    assert report["resume"]["reused"] == 1  # b's input file (it uses the outputs only, and is unchanged)
    assert "What is 3+3?" in _rows_text(tmp_path / "out")

    again, _ = _convert(logs, tmp_path / "out", resume=True)  # nothing changed: every part is reused
    assert again["resume"]["reused"] == again["resume"]["parts"] == 4


def test_resume_after_changing_only_a_batch_output_file_converts_again_the_input_files_that_it_answers(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "logs"
    _batch(logs, "openai", "a", ["Q1?", "Q2?"])
    _, b_out = _batch(logs, "openai", "b", ["Q3?", "Q4?"])
    _convert(logs, tmp_path / "out", resume=True)

    b_out.write_text(b_out.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")  # one result lost
    report, _ = _resumed_and_clean(logs, tmp_path, "changing a batch output file")
    # Reused: a's output only (b's output changed; both input files say which of their requests were answered).
    assert report["resume"]["reused"] == 1
    assert report["records"]["skipped_by_reason"]["batch_request_unanswered"] == 1


def _bench(root: Path) -> Path:
    shutil.copytree(SAMPLE_LOGS / "mt_bench", root)
    return root


def test_mt_bench_answers_declare_the_question_file_they_are_read_with(tmp_path: Path) -> None:
    bench = _bench(tmp_path / "mt_bench")
    answers = PurePosixPath((bench / "model_answer" / "demo-model.jsonl").as_posix())
    beside, up = answers.parent / "question.jsonl", answers.parent.parent / "question.jsonl"
    assert declared_partners(answers, LocalFiles()) == sorted([beside, up])  # the absent one looked at first too
    assert declared_partners(up, LocalFiles()) == []  # a question file is read alone
    shutil.copy(bench / "question.jsonl", bench / "model_answer" / "question.jsonl")
    assert declared_partners(answers, LocalFiles()) == [beside]  # the folder's own takes over


def test_resume_after_changing_only_the_question_file_gives_a_clean_run(tmp_path: Path) -> None:
    logs = _bench(tmp_path / "logs" / "mt_bench")
    shutil.copy(SAMPLE_LOGS / "openai_chat" / "conversations.jsonl", logs / "model_answer" / "chats.jsonl")
    _convert(logs, tmp_path / "out", resume=True)
    questions = logs / "question.jsonl"
    first = json.loads(questions.read_text(encoding="utf-8").splitlines()[0])
    edited = {**first, "turns": ["A reworded first question?", *first["turns"][1:]]}
    rest = questions.read_text(encoding="utf-8").splitlines(keepends=True)[1:]
    questions.write_text(json.dumps(edited) + "\n" + "".join(rest), encoding="utf-8")

    report, _ = _resumed_and_clean(logs, tmp_path, "changing the question file")
    assert report["resume"]["reused"] == 1  # the unrelated log beside the answers
    assert "A reworded first question?" in _rows_text(tmp_path / "out")


def test_a_folder_s_batch_index_is_built_once_per_run_whatever_the_number_of_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "logs"
    for name in ("a", "b", "c", "d"):
        _batch(logs, "openai", name, [f"{name} question {i}?" for i in range(3)])
    built: list[str] = []
    for function in ("_build_requests", "_build_answered"):
        real = getattr(batch_files, function)

        def counted(*args: Any, _real: Any = real, _name: str = function) -> None:
            built.append(_name)
            _real(*args)

        monkeypatch.setattr(batch_files, function, counted)
    report, _ = _convert(logs, tmp_path / "out", resume=False)
    assert report["samples"]["written"] == 12
    assert sorted(built) == ["_build_answered", "_build_requests"]  # one per side, not one per file


def test_on_an_object_store_each_batch_file_is_copied_once_per_side_and_resume_follows_a_changed_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("moto.server", reason="needs moto's server mode: pip install 'msgtrain[store-test]'")
    pytest.importorskip("s3fs", reason="needs s3fs: pip install 'msgtrain[store-test]'")
    from collections import Counter

    from msgtrain.run.storage import Store
    from tests.store_helpers import moto_s3

    logs = tmp_path / "logs"
    batches = [_batch(logs, "openai", name, [f"{name} question {i}?" for i in range(2)]) for name in "abc"]
    copies: Counter[str] = Counter()
    real = Store.download

    def counted(self: Store, url: str, dest: Path) -> None:
        copies[url.rpartition("/")[2]] += 1
        real(self, url, dest)

    monkeypatch.setattr(Store, "download", counted)
    with moto_s3("joined") as store:
        for p in sorted(logs.iterdir()):
            store.upload(p, f"s3://joined/logs/{p.name}")
        report, _ = _convert("s3://joined/logs", tmp_path / "out", resume=True)
        assert report["samples"]["written"] == 6
        # Each file once as an input, and once for the index of the other side (not once per file of the folder).
        assert max(copies.values()) == 2 and set(copies) == {p.name for pair in batches for p in pair}

        a_in = batches[0][0]
        a_in.write_text(a_in.read_text(encoding="utf-8").replace("a question 0?", "a changed question?"))
        store.upload(a_in, f"s3://joined/logs/{a_in.name}")
        report, _ = _resumed_and_clean("s3://joined/logs", tmp_path, "changing a batch input object")
        assert report["resume"]["reused"] == 2  # b's and c's input objects
        assert "a changed question?" in _rows_text(tmp_path / "out")


def test_workers_asking_for_one_index_at_once_build_it_once_and_all_read_it_whole(tmp_path: Path) -> None:
    shared = SharedIndex(tmp_path / "shared")
    builds: list[int] = []
    start = threading.Barrier(4)

    def build(dest: Path) -> None:
        builds.append(1)
        time.sleep(0.2)  # the others arrive while it is being built
        dest.write_text("index", encoding="utf-8")

    def ask(found: list[str]) -> None:
        start.wait()
        found.append(shared.get("batch-requests-key", build).read_text(encoding="utf-8"))

    found: list[str] = []
    threads = [threading.Thread(target=ask, args=(found,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert builds == [1] and found == ["index"] * 4
    assert sorted(p.name for p in (tmp_path / "shared").iterdir() if not p.name.startswith(".")) == [
        "batch-requests-key"
    ]  # no partial file left
