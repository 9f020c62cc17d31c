"""Nightly-batch reliability: garbage in the input, killed runs, absurd sizes — nothing lost, nothing half-written."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from msgtrain.run.parts import LinearizeSettings, convert_file
from tests.conftest import ROOT, SAMPLE_LOGS, as_a_terminal_job

SETTINGS = LinearizeSettings(tokenizer=None, chat_template=None, policies=(), render_date=None, input_format=None)
GOOD_CALLS = (SAMPLE_LOGS / "calls" / "agent_calls.jsonl").read_text().splitlines()
GOOD_GRAPH = (SAMPLE_LOGS / "native" / "edit_and_compaction.graph.jsonl").read_text().splitlines()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _mutate(rng: random.Random, line: str) -> str:
    """A malformed variant of a valid record: cut, wrong types, missing or unknown fields, bad bytes."""
    obj: Any = json.loads(line)
    choice = rng.randrange(7)
    if choice == 0:
        return line[: rng.randrange(1, len(line))]  # truncated JSON
    if choice == 1:
        return line.replace('"role": "user"', '"role": "hacker"', 1).replace('"role":"user"', '"role":"hacker"', 1)
    if choice == 2 and isinstance(obj, dict):
        obj.pop(rng.choice(sorted(obj)), None)
        return json.dumps(obj)
    if choice == 3 and isinstance(obj, dict):
        key = rng.choice(sorted(obj))
        obj[key] = rng.choice([None, 7, "x", [], {}])
        return json.dumps(obj)
    if choice == 4:
        return "[" * 5000 + "]" * 5000
    if choice == 5:
        return json.dumps(
            {
                "request": {"messages": [{"role": "tool", "content": "orphan", "tool_call_id": "nope"}]},
                "response": {"choices": [{"message": {"role": "assistant", "content": "x"}}]},
            }
        )
    return "\udcff not utf8"  # becomes invalid UTF-8 below


def _write(path: Path, lines: list[str]) -> None:
    with open(path, "wb") as f:
        for line in lines:
            f.write(line.encode("utf-8", "surrogateescape") + b"\n")


def _samples_key(samples: list[Any]) -> list[tuple[Any, ...]]:
    return [(s.graph_id, tuple(s.input_ids.tolist()), tuple(s.loss_mask.tolist()), tuple(s.turn_ids)) for s in samples]


def _check_books(stats: Any) -> None:
    assert stats.records_read == stats.records_converted + sum(stats.records_rejected.values()) + sum(
        stats.records_skipped.values()
    )
    assert stats.turns_found == stats.turns_trained + sum(stats.turns_dropped.values())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), garbage=st.lists(json_values, max_size=4))
def test_garbage_around_valid_records_never_raises_and_never_changes_their_output(
    tmp_path: Path, seed: int, garbage: list[Any]
) -> None:
    rng = random.Random(seed)
    clean = tmp_path / f"clean-{seed}.jsonl"
    _write(clean, GOOD_CALLS)
    want, want_stats, _ = convert_file(clean, SETTINGS)
    lines = list(GOOD_CALLS)
    noise = [_mutate(rng, rng.choice(GOOD_CALLS)) for _ in range(rng.randint(1, 5))]
    noise += [json.dumps(g) for g in garbage]
    for n in noise:
        lines.insert(rng.randint(0, len(lines)), n)
    dirty = tmp_path / f"clean-{seed}.jsonl"
    dirty.unlink()
    _write(dirty, lines)
    got, stats, rejects = convert_file(dirty, SETTINGS)
    _check_books(stats)
    assert stats.records_read == len([x for x in lines if x.strip()])
    assert sum(stats.records_rejected.values()) == len(rejects)
    # Mutated records that stayed valid (e.g. an unknown field dropped) may add samples; the originals are intact.
    assert set(_samples_key(want)) <= set(_samples_key(got)) or stats.records_converted < want_stats.records_converted


def test_a_broken_node_costs_its_own_record_and_what_hangs_below_it_not_the_other_graphs(tmp_path: Path) -> None:
    other = [line.replace("demo-weather-1", "second-graph") for line in GOOD_GRAPH]
    broken = [line.replace("demo-weather-1", "broken") for line in GOOD_GRAPH]
    node = next(i for i, line in enumerate(broken) if '"type":"node"' in line and '"parent":null' not in line)
    rec = json.loads(broken[node])
    rec["parent"] = "does-not-exist"
    broken[node] = json.dumps(rec)
    path = tmp_path / "multi.graph.jsonl"
    _write(path, GOOD_GRAPH + broken + other)
    samples, stats, rejects = convert_file(path, SETTINGS)
    _check_books(stats)
    assert [json.loads(r)["reason"] for r in rejects] == ["dangling_parent"]
    # The two intact graphs convert whole; the broken one keeps only what does not hang below its bad node.
    _write(tmp_path / "good.graph.jsonl", GOOD_GRAPH)
    good, _, _ = convert_file(tmp_path / "good.graph.jsonl", SETTINGS)
    per_graph = {g: sum(len(s.turn_ids) for s in samples if s.graph_id == g) for g in {s.graph_id for s in samples}}
    whole = sum(len(s.turn_ids) for s in good)
    assert per_graph["demo-weather-1"] == per_graph["second-graph"] == whole
    assert per_graph.get("broken", 0) < whole


def test_absurd_sizes_are_rejected_not_attempted(tmp_path: Path) -> None:
    from msgtrain.ingest.core import base

    path = tmp_path / "huge.jsonl"
    big = json.dumps({"request": {"messages": [{"role": "user", "content": "x" * (base.MAX_RECORD_BYTES + 10)}]}})
    deep = "[" * 100_000 + "]" * 100_000
    _write(path, [GOOD_CALLS[0], big, deep, GOOD_CALLS[1]])
    samples, stats, rejects = convert_file(path, SETTINGS)
    _check_books(stats)
    assert len(rejects) == 2
    assert stats.records_rejected["record_too_large"] == 1
    assert sum(stats.records_rejected.values()) == 2 and samples


def _convert_cmd(logs: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "msgtrain.cli", "convert", str(logs), "-o", str(out), "-q", *extra]


def _convert(logs: Path, out: Path, *extra: str) -> int:
    """The same convert as :func:`_convert_cmd`, in this process: its exit code."""
    from msgtrain.cli import main

    return main(_convert_cmd(logs, out, *extra)[3:])


def _make_logs(root: Path, n: int) -> Path:
    logs = root / "logs"
    logs.mkdir()
    records = [json.loads(line) for line in GOOD_CALLS]
    for i in range(n):
        with open(logs / f"calls-{i:03d}.jsonl", "w") as f:
            for k in range(4):
                for rec in records:
                    f.write(json.dumps({**rec, "session_id": f"{i}-{k}"}) + "\n")
    return logs


def test_sigkill_mid_run_leaves_the_previous_output_and_resume_finishes_byte_identical(tmp_path: Path) -> None:
    logs = _make_logs(tmp_path, 40)
    reference = tmp_path / "reference"
    # Only the killed run is a process of its own; the others run in this one (the test is not about them).
    assert _convert(logs, reference) == 0
    out = tmp_path / "out"
    # A previous night's dataset is in place; the new run gets killed part-way.
    assert _convert(logs, out) == 0
    before = {p.name: p.read_bytes() for p in (out / "data").iterdir()}
    (logs / "calls-000.jsonl").write_text((logs / "calls-000.jsonl").read_text() + GOOD_CALLS[0] + "\n")
    state = tmp_path / ".out.msgtrain-state" / "parts"
    proc = subprocess.Popen(_convert_cmd(logs, out, "--resume"), cwd=ROOT)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        done = [p for p in state.iterdir() if not p.name.startswith(".")] if state.exists() else []
        if len(done) >= 3:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed: make the input larger"
    assert {p.name: p.read_bytes() for p in (out / "data").iterdir()} == before  # readers still see last night's
    assert _convert(logs, out, "--resume") == 0
    fresh = tmp_path / "fresh"
    assert _convert(logs, fresh) == 0
    for f in (fresh / "data").iterdir():
        assert (out / "data" / f.name).read_bytes() == f.read_bytes()
    assert pq.read_table(out / "data" / "train-00000-of-00001.parquet").num_rows > 0
    assert (reference / "data").exists()


def test_max_reject_rate_aborts_a_run_drowning_in_garbage_and_publishes_nothing(tmp_path: Path) -> None:
    from msgtrain.cli import main

    logs = tmp_path / "logs"
    logs.mkdir()
    _write(logs / "junk.jsonl", [GOOD_CALLS[0]] + ["{broken"] * 30)
    out = tmp_path / "out"
    assert main(["convert", str(logs), "-o", str(out), "-q", "--max-reject-rate", "0.5"]) == 1
    assert not out.exists()
    assert main(["convert", str(logs), "-o", str(out), "-q", "--max-reject-rate", "0.99"]) == 3


def test_ctrl_c_stops_cleanly_says_what_was_done_and_resume_finishes(tmp_path: Path) -> None:
    logs = _make_logs(tmp_path, 40)
    out = tmp_path / "out"
    state = tmp_path / ".out.msgtrain-state" / "parts"
    proc = subprocess.Popen(
        _convert_cmd(logs, out, "--resume"), cwd=ROOT, stderr=subprocess.PIPE, text=True, preexec_fn=as_a_terminal_job
    )
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if state.exists() and len([p for p in state.iterdir() if not p.name.startswith(".")]) >= 2:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted after" in err and "--resume" in err and "Traceback" not in err
    assert not out.exists()
    assert _convert(logs, out, "--resume") == 0
    assert pq.read_table(out / "data" / "train-00000-of-00001.parquet").num_rows > 0


def test_a_part_reported_done_but_not_visible_to_the_driver_stops_the_run_instead_of_dropping_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a local OUT on a multi-node Ray cluster would do: the worker writes its part where only it can see it.
    from msgtrain.errors import OutputError
    from msgtrain.run import execute, pipeline
    from msgtrain.run.config import ConvertConfig
    from msgtrain.run.parts import convert_job

    def convert_elsewhere(job: Any, settings: Any, parts_dir: Any) -> dict[str, Any]:
        return convert_job(job, settings)[1].to_json()

    monkeypatch.setattr(execute, "_convert_to_part", convert_elsewhere)
    logs = _make_logs(tmp_path, 2)
    with pytest.raises(OutputError, match="2 parts reported done are not in"):
        pipeline.convert(ConvertConfig(inputs=(logs,), output=tmp_path / "out", quiet=True))
    assert not (tmp_path / "out").exists()
