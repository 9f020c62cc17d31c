"""NeMo Gym rollouts (the ``nemo_gym`` reader): one trajectory per line with its reward, each model call's engine
token ids (``prompt_token_ids``, ``generation_token_ids``, ``generation_log_probs``) carried into the rows and
checked against the logged text (``engine_ids_mismatch``).

Real data: ``resources_servers/competitive_coding_challenges/data/example_rollouts.jsonl`` of github.com/NVIDIA-NeMo/Gym
at 07d6b0d07b22fcf530b4c211dae2ee23100428e4 (five rollouts of a Qwen3 model served by vLLM with
``return_token_id_information``: thinking, then a C++ answer; Apache-2.0). It is read from a fetched mirror of that
repository beside the checkout (``../.mirror/NVIDIA-NeMo+Gym/repo``, a git directory) when it is there, and skipped
otherwise; it is never copied into this repository. ``sample_logs/nemo_gym/example_rollouts.jsonl`` is hand-made in
that file's exact shape (and a multi-turn tool-calling rollout in the shape NeMo Gym's responses converter writes),
with ids of the embedded demo tokenizer, so the same checks always run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from msgtrain.cli import main
from msgtrain.linearize.engine_ids import ENGINE_IDS_MISMATCH
from tests.conftest import ROOT, shared_path

FIXTURE = ROOT / "sample_logs" / "nemo_gym" / "example_rollouts.jsonl"
MIRROR = ROOT.parent / ".mirror" / "NVIDIA-NeMo+Gym" / "repo"
COMMIT = "07d6b0d07b22fcf530b4c211dae2ee23100428e4"
REAL = "resources_servers/competitive_coding_challenges/data/example_rollouts.jsonl"


def convert(out: Path, inputs: Path, *args: str) -> tuple[int, list[dict[str, Any]], dict[str, Any]]:
    import pyarrow.parquet as pq

    code = main(["convert", str(inputs), "-o", str(out), "-q", "--target", "rl", *args])
    rows = [r for f in sorted((out / "data").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    return code, rows, report


def bundles(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [item for rec in records for item in rec["response"]["output"] if item.get("generation_token_ids")]


def check_rows_are_the_logged_ids(rows: list[dict[str, Any]], records: list[dict[str, Any]]) -> None:
    """Every model call's ids are a row's: its prompt ids then its generation ids, trained on the generation with
    the logged logprobs; each row carries its rollout's reward."""
    by_ids = {tuple(r["input_ids"]): r for r in rows}
    rewards = {(rec["_ng_task_index"], rec["_ng_rollout_index"]): rec["reward"] for rec in records}
    calls = bundles(records)
    assert len(calls) == len(rows)
    for call in calls:
        row = by_ids[tuple(call["prompt_token_ids"] + call["generation_token_ids"])]
        cut = len(call["prompt_token_ids"])
        assert row["prompt_length"] == cut and row["token_source"] == "engine" and row["logprobs_complete"]
        assert row["loss_mask"] == [0] * cut + [1] * len(call["generation_token_ids"])
        assert row["logprobs"][cut:] == pytest.approx(call["generation_log_probs"], abs=1e-6)
        meta = json.loads(row["metadata"])
        assert row["reward"] == rewards[meta["_ng_task_index"], meta["_ng_rollout_index"]]


def with_ids_of_another_reply(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records with each model call's generation ids (and logprobs) replaced by the next call's: in-vocabulary
    ids of another reply, which a range check cannot tell from the right ones."""
    out = json.loads(json.dumps(records))
    calls = bundles(out)
    shifted = [(c["generation_token_ids"], c["generation_log_probs"]) for c in calls[1:] + calls[:1]]
    for call, (ids, logprobs) in zip(calls, shifted, strict=True):
        call["generation_token_ids"], call["generation_log_probs"] = ids, logprobs
    return out


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_nemo_gym_rollouts_train_each_model_calls_engine_ids_with_its_reward(tmp_path: Path) -> None:
    records = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    code, rows, report = convert(tmp_path / "out", FIXTURE, "--group-by", "_ng_task_index")
    assert code == 0 and report["tokens"]["engine_share"] == 1.0
    check_rows_are_the_logged_ids(rows, records)
    groups: dict[str, set[str]] = {}
    for row in rows:
        groups.setdefault(row["group_id"], set()).add(row["trajectory_id"])
    assert sorted(len(t) for t in groups.values()) == [1, 2]  # two rollouts of task 0, one of task 1
    multi = [r for r in rows if json.loads(r["metadata"])["_ng_task_index"] == 1]
    assert len(multi) == 2 and all(r["weight"] == 0.5 for r in multi)  # one trajectory cut in two rows
    assert report["behaviour"]["rows_with_complete_logprobs"] == len(rows)


def test_nemo_gym_ids_of_another_reply_are_never_trained_silently(tmp_path: Path) -> None:
    records = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    bad = write(tmp_path / "logs" / "rollouts.jsonl", with_ids_of_another_reply(records))
    code, rows, report = convert(tmp_path / "out", bad)
    assert code == 3 and not rows
    assert report["turns"]["dropped_by_reason"] == {ENGINE_IDS_MISMATCH: len(bundles(records))}


def test_nemo_gym_empty_bundles_are_no_ids_and_two_bundles_in_one_run_are_refused(tmp_path: Path) -> None:
    records = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    stripped = json.loads(json.dumps(records))
    for call in bundles(stripped):  # published with the ids removed, as some Gym example files are
        call.update(prompt_token_ids=[], generation_token_ids=[], generation_log_probs=[])
    code, rows, report = convert(tmp_path / "plain", write(tmp_path / "a" / "r.jsonl", stripped))
    assert code == 0 and rows and report["tokens"]["engine"] == 0
    two = json.loads(json.dumps(records[:1]))
    reasoning, message = two[0]["response"]["output"]
    reasoning.update({k: message[k] for k in ("prompt_token_ids", "generation_token_ids", "generation_log_probs")})
    code, rows, report = convert(tmp_path / "two", write(tmp_path / "b" / "r.jsonl", two), "--allow-empty")
    assert report["records"]["rejected_by_reason"] == {"ambiguous_token_ids": 1}


def real_rollouts(tmp_path: Path) -> Path:
    if not MIRROR.is_dir() or shutil.which("git") is None:
        pytest.skip(f"{MIRROR} (a fetched mirror of github.com/NVIDIA-NeMo/Gym) is not present")
    shown = subprocess.run(
        ["git", "--git-dir", str(MIRROR), "show", f"{COMMIT}:{REAL}"], capture_output=True, check=False
    )
    if shown.returncode != 0:
        pytest.skip(f"the mirror does not hold {REAL} at {COMMIT}: {shown.stderr.decode()[:200]}")
    path = tmp_path / "logs" / "example_rollouts.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(shown.stdout)
    return path


def test_a_real_nemo_gym_log_trains_its_engine_ids_and_refuses_ids_of_another_reply(tmp_path: Path) -> None:
    vocabulary = shared_path("tokenizers", "qwen3")
    path = real_rollouts(tmp_path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    code, rows, report = convert(tmp_path / "out", path, "--tokenizer", str(vocabulary), "--group-by", "problem_id")
    assert code == 0 and len(rows) == len(records) == 5
    assert report["tokens"]["engine_share"] == 1.0 and report["turns"]["dropped"] == 0
    check_rows_are_the_logged_ids(rows, records)
    assert len({r["group_id"] for r in rows}) == len({rec["problem_id"] for rec in records})
    bad = write(tmp_path / "bad" / "rollouts.jsonl", with_ids_of_another_reply(records))
    code, rows, report = convert(tmp_path / "bad_out", bad, "--tokenizer", str(vocabulary))
    assert code == 3 and not rows and report["turns"]["dropped_by_reason"] == {ENGINE_IDS_MISMATCH: 5}
