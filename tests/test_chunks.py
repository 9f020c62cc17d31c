"""Huge JSONL logs cut into chunks of whole conversations give exactly the samples of the whole file.

The reference is the whole file converted in one piece; every check compares the chunks' outputs, concatenated in
chunk order, against it (same samples in the same order, same accounting, same rejects).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from benchmarks import corpus as gen
from msgtrain.errors import MsgtrainError
from msgtrain.export.schema import CANONICAL_SCHEMA, samples_to_table
from msgtrain.ingest.core.base import record_limit
from msgtrain.ingest.core.chunks import ChunkKey, is_jsonl, iter_chunk_lines, key_function, plan_chunks
from msgtrain.ingest.core.json_stream import iter_array_items
from msgtrain.ingest.detect import detect_format
from msgtrain.run import pipeline
from msgtrain.run.config import ConvertConfig
from msgtrain.run.parts import (
    LinearizeSettings,
    PartStats,
    convert_file,
    merge_chunk_rejects,
    merge_chunk_tables,
)
from tests.conftest import shared_path

SETTINGS = LinearizeSettings(tokenizer=None, chat_template=None, policies=(), render_date=None, input_format=None)


# ------------------------------------------------------------------------------------------------ the planner
def _fake_key(value: Any) -> ChunkKey:
    if isinstance(value, MsgtrainError):
        return ()
    if value.get("sticky"):
        return None
    return tuple(value["k"])


line_specs = st.lists(
    st.one_of(
        st.just("blank"),
        st.just("bad"),
        st.just("sticky"),
        st.lists(st.integers(0, 12), min_size=0, max_size=3),
    ),
    min_size=1,
    max_size=80,
)


def _write_spec(path: Path, spec: list[Any], pad: int) -> list[bytes]:
    lines = []
    for i, item in enumerate(spec):
        if item == "blank":
            raw = b"\n"
        elif item == "bad":
            raw = b'{"k": [\n'
        elif item == "sticky":
            raw = json.dumps({"sticky": True, "i": i, "pad": "x" * pad}).encode() + b"\n"
        else:
            raw = json.dumps({"k": [f"key{k}" for k in item], "i": i, "pad": "x" * pad}).encode() + b"\n"
        lines.append(raw)
    path.write_bytes(b"".join(lines))
    return lines


def _reference_groups(spec: list[Any]) -> list[int]:
    """Group of each line by a plain fixed-point computation (no union-find): the planner's contract."""
    group = list(range(len(spec)))
    changed = True
    while changed:
        changed = False
        for i, item in enumerate(spec):
            if item in ("blank", "sticky") and i > 0 and group[i] != group[i - 1]:
                lo = min(group[i], group[i - 1])
                group[i] = group[i - 1] = lo
                changed = True
            if isinstance(item, list):
                for j in range(i):
                    if isinstance(spec[j], list) and set(spec[j]) & set(item) and group[i] != group[j]:
                        lo = min(group[i], group[j])
                        group[i] = group[j] = lo
                        changed = True
    return group


@settings(max_examples=150, deadline=None)
@given(spec=line_specs, pad=st.integers(0, 300), target=st.integers(50, 3000))
def test_chunks_cover_every_line_once_and_never_split_a_group(
    tmp_path_factory: pytest.TempPathFactory, spec: list[Any], pad: int, target: int
) -> None:
    path = tmp_path_factory.mktemp("plan") / "log.jsonl"
    lines = _write_spec(path, spec, pad)
    chunks = plan_chunks(path, _fake_key, target)
    event(f"chunks: {min(len(chunks), 3)}")
    if not chunks:
        return
    assert [c.index for c in chunks] == list(range(len(chunks))) and all(c.count == len(chunks) for c in chunks)
    chunk_of: dict[int, int] = {}
    for c in chunks:
        got = list(iter_chunk_lines(path, c))
        assert sum(len(raw) for _, raw in got) == c.bytes
        for lineno, raw in got:
            assert raw == lines[lineno - 1]  # the original line under its original number
            assert lineno not in chunk_of, "a line is in two chunks"
            chunk_of[lineno] = c.index
    assert sorted(chunk_of) == list(range(1, len(lines) + 1)), "a line is in no chunk"
    groups = _reference_groups(spec)
    by_group: dict[int, set[int]] = {}
    for i, g in enumerate(groups):
        by_group.setdefault(g, set()).add(chunk_of[i + 1])
    assert all(len(s) == 1 for s in by_group.values()), "a conversation was split"
    # Chunks hold consecutive groups in first-line order: concatenating them keeps the whole file's order.
    first_line = {g: groups.index(g) for g in by_group}
    ordered = sorted(by_group, key=lambda g: first_line[g])
    assert [next(iter(by_group[g])) for g in ordered] == sorted(next(iter(by_group[g])) for g in ordered)


def test_small_files_and_one_conversation_files_are_not_cut(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    _write_spec(path, [["a"]] * 50, 100)
    assert plan_chunks(path, _fake_key, 500) == []  # one conversation: never cut, whatever the size
    _write_spec(path, [["a"], ["b"]], 10)
    assert plan_chunks(path, _fake_key, 10_000) == []  # under the target


# ------------------------------------------------------------------------------------------------ conversions
def _whole_vs_chunks(path: Path, target: int, min_chunks: int = 3) -> tuple[list[Any], PartStats, list[str]]:
    whole_samples, whole_stats, whole_rejects = convert_file(path, SETTINGS)
    reader = detect_format(path)
    assert is_jsonl(path)
    keys = key_function(reader, path)
    assert keys is not None
    chunks = plan_chunks(path, keys, target)
    assert len(chunks) >= min_chunks
    tables: list[pa.Table] = []
    stats = PartStats()
    rejects: list[str] = []
    for chunk in chunks:
        s, st_, r = convert_file(path, SETTINGS, chunk)
        tables.append(samples_to_table(s) if s else CANONICAL_SCHEMA.empty_table())
        stats.add(st_)
        rejects.append("".join(r))
    assert stats.to_json() == whole_stats.to_json()
    assert list(merge_chunk_rejects(rejects)) == whole_rejects  # the same rejects, in file order
    got = [row for t in merge_chunk_tables(tables, 7) for row in t.to_pylist()]
    assert got == samples_to_table(whole_samples).to_pylist()  # the same samples, in the same order
    return whole_samples, whole_stats, whole_rejects


def _interleave(per_conversation: list[list[str]], seed: int) -> list[str]:
    """Records of several conversations mixed as concurrent sessions write them (each one's order kept)."""
    rng = random.Random(seed)
    queues = [list(q) for q in per_conversation]
    out = []
    while any(queues):
        out.append(rng.choice([q for q in queues if q]).pop(0))
    return out


def test_per_call_logs_of_interleaved_sessions(tmp_path: Path) -> None:
    convs = gen.make_conversations(gen.synthetic_pool(), 8, 12, reasoning=True)
    per_conv = []
    for k, conv in enumerate(convs):
        records = list(gen.call_records(conv, model="policy", engine=None))
        if k % 3 == 0:  # no session id: grouped by the first two request messages
            for r in records:
                del r["session_id"]
        per_conv.append([json.dumps(r) for r in records])
    lines = _interleave(per_conv, seed=1)
    lines.insert(7, '{"request": {"messages": [{"role": "user"')  # corrupt
    lines.insert(20, "")
    lines.insert(31, '{"request": 1, "response": {}}')  # not a call
    path = tmp_path / "calls.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    samples, stats, rejects = _whole_vs_chunks(path, path.stat().st_size // 6)
    assert stats.graphs == 12 and len(rejects) == 2 and samples


def test_native_graph_logs_with_interleaved_graphs(tmp_path: Path) -> None:
    convs = gen.make_conversations(gen.synthetic_pool(), 6, 8, reasoning=False)
    per_graph = []
    for conv in convs:
        one = tmp_path / f"{conv.session}.jsonl"
        gen.write_native(one, [conv], model="policy")
        per_graph.append(one.read_text(encoding="utf-8").splitlines())
    path = tmp_path / "graphs.jsonl"
    lines = _interleave(per_graph, seed=2)
    lines.insert(5, '{"type": "node"')
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _, stats, _ = _whole_vs_chunks(path, path.stat().st_size // 5)
    assert stats.graphs == 8


def test_message_per_line_runs_stay_whole(tmp_path: Path) -> None:
    """ShareGPT/OpenAI files mix one-conversation lines with runs of one-message lines; a corrupt line inside or
    before a run changes how the run is read, so it stays with its run."""
    lines: list[str] = []
    for k in range(30):
        user = {"role": "user", "content": f"question {k} " + "pad " * 40}
        answer = {"role": "assistant", "content": f"answer {k} " + "pad " * 40}
        if k % 4 == 1:
            lines += [json.dumps(user), json.dumps(answer)]
            if k % 8 == 1:
                lines.append("{broken")
                lines.append(json.dumps({"role": "user", "content": "more"}))
                lines.append(json.dumps({"role": "assistant", "content": "and more"}))
        elif k % 7 == 3:
            lines.append("{broken")
            lines += [json.dumps(user), json.dumps(answer)]
        else:
            lines.append(json.dumps({"messages": [user, answer], "id": k}))
    path = tmp_path / "chat.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert detect_format(path).name == "openai_chat"
    _whole_vs_chunks(path, path.stat().st_size // 8)


def test_real_sharegpt_log_in_chunks() -> None:
    path = shared_path("real_logs", "sharegpt_llamafactory", "reason_tool_use_demo_50.jsonl")
    samples, stats, _ = _whole_vs_chunks(path, path.stat().st_size // 5, min_chunks=4)
    assert stats.records_read == 50 and samples


# ------------------------------------------------------------------------------------------------ the pipeline
def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _rows(out: Path) -> list[dict[str, Any]]:
    return pq.read_table(sorted((out / "data").glob("*.parquet"))).to_pylist()


def test_pipeline_output_does_not_depend_on_chunks_or_workers(tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    convs = gen.make_conversations(gen.synthetic_pool(), 6, 10, reasoning=True)
    per_conv = [[json.dumps(r) for r in gen.call_records(c, model="policy", engine=None)] for c in convs]
    lines = _interleave(per_conv, seed=5)
    lines.insert(3, "{not json")
    lines.insert(40, '{"request": {"messages": []}, "response": {"choices": []}}')
    (inputs / "big.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    gen.write_calls(inputs / "small.jsonl", convs[:1], model="policy")
    chunk_mb = ((inputs / "big.jsonl").stat().st_size // 4 + 2) / (1 << 20)

    def run(out: str, **kw: Any) -> dict[str, Any]:
        return pipeline.convert(ConvertConfig(inputs=(inputs,), output=tmp_path / out, **kw))

    for extra in ({}, {"target": "packed", "pack_length": 4096, "split": {"validation": 0.3}}):
        whole = run("whole", chunk_mb=0, **extra)
        one = run("one", chunk_mb=chunk_mb, **extra)
        two = run("two", chunk_mb=chunk_mb, workers=2, **extra)
        assert whole["resume"]["parts"] == 2 and one["resume"]["parts"] >= 4 and two["resume"] == one["resume"]
        assert whole["records"]["rejected"] == 2
        # Byte-identical datasets, reports and rejects: chunks change how the work is spread, not its result.
        assert _tree(tmp_path / "one") == _tree(tmp_path / "whole") == _tree(tmp_path / "two")
    parts = one["resume"]["parts"]

    again = run("one", chunk_mb=chunk_mb, resume=True, **extra)
    assert again["resume"] == {"parts": parts, "reused": parts, "converted": 0}
    assert _tree(tmp_path / "one") == _tree(tmp_path / "whole")
    # Another chunk size is another plan: its parts are converted, the old plan's parts are not mixed in.
    other = run("one", chunk_mb=chunk_mb * 2, resume=True, **extra)
    assert 2 < other["resume"]["parts"] < parts and other["resume"]["reused"] == 1  # the small file's part
    assert _tree(tmp_path / "one") == _tree(tmp_path / "whole")


def _array_text(items: list[str]) -> str:
    """A JSON array of ``items`` (JSON texts) as a pretty-printer writes it: one item per indented block."""
    return "[\n" + ",\n".join("  " + item.replace("\n", "\n  ") for item in items) + "\n]\n"


def test_json_array_chunks_give_the_whole_arrays_output(tmp_path: Path) -> None:
    """A JSON array above --max-record-mb is read item by item, and above --chunk-mb cut into chunks of whole items:
    a call log whose conversations span items (grouped by their chunk keys), and a messages dataset with runs of
    bare messages (one conversation, as message-per-line JSONL), give exactly the unchunked conversion — rows,
    books, rejects and their ``item i`` names — at one or two workers, and resume reuses every chunk's part."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    sample = Path(__file__).resolve().parents[1] / "sample_logs" / "openai_responses" / "calls.jsonl"
    copies = [
        [json.dumps(json.loads(line), indent=1) for line in copy] for copy in _copies(sample, 16, _vary_responses)
    ]
    calls = _interleave(copies, seed=7)  # chains of calls (previous_response_id, conversation keys) across items
    calls.insert(3, '{"request": nope}')  # an item that does not parse: its own reject
    calls.insert(20, '{"request": {"messages": []}, "response": {"choices": []}}')
    (inputs / "calls.json").write_text(_array_text(calls), encoding="utf-8")
    chats: list[str] = []
    for k in range(40):
        user = {"role": "user", "content": f"question {k} " + "pad " * 30}
        answer = {"role": "assistant", "content": f"answer {k} " + "pad " * 30}
        if k % 5 == 2:  # a run of bare messages: one conversation spanning items
            chats += [
                json.dumps(user),
                json.dumps(answer),
                json.dumps({**user, "content": "again"}),
                json.dumps(answer),
            ]
        elif k % 9 == 4:
            chats.append('{"not": "a conversation"}')
        else:
            chats.append(json.dumps({"messages": [user, answer], "id": k}, indent=2))
    (inputs / "chats.json").write_text(_array_text(chats), encoding="utf-8")
    largest = max(len(item.encode()) for item in calls + chats)
    record_mb = 2 * largest / (1 << 20)  # both files are far above it: read item by item
    chunk_mb = min(p.stat().st_size for p in inputs.iterdir()) / 5 / (1 << 20)
    assert detect_format(inputs / "chats.json").name == "openai_chat"
    assert detect_format(inputs / "calls.json").name == "openai_responses"

    def run(out: str, **kw: Any) -> dict[str, Any]:
        return pipeline.convert(ConvertConfig(inputs=(inputs,), output=tmp_path / out, max_record_mb=record_mb, **kw))

    whole = run("whole", chunk_mb=0)
    one = run("one", chunk_mb=chunk_mb)
    two = run("two", chunk_mb=chunk_mb, workers=2)
    assert whole["resume"]["parts"] == 2 and one["resume"]["parts"] >= 8 and two["resume"] == one["resume"]
    assert whole["records"]["read"] == len(calls) + len(chats) and whole["records"]["rejected"] == 4
    assert _tree(tmp_path / "one") == _tree(tmp_path / "whole") == _tree(tmp_path / "two")
    rejects = (tmp_path / "one" / "rejects.jsonl").read_text(encoding="utf-8")
    assert '"record": "item 3"' in rejects and '"record": "item 22"' in rejects  # (named as the whole read names them)
    assert any(str(row["source"]).endswith("(item 0)") for row in _rows(tmp_path / "one"))
    again = run("one", chunk_mb=chunk_mb, resume=True)
    assert again["resume"] == {"parts": one["resume"]["parts"], "reused": one["resume"]["parts"], "converted": 0}
    assert _tree(tmp_path / "one") == _tree(tmp_path / "whole")
    # Reading an array's chunks reads each item once: they cover the array, in order.
    chats_path = inputs / "chats.json"
    keys = key_function(detect_format(chats_path), chats_path)
    assert keys is not None
    with record_limit(int(record_mb * (1 << 20))):
        chunks = plan_chunks(chats_path, keys, int(chunk_mb * (1 << 20)), items=True)
        read = [i for c in chunks for run in c.runs for i, _, _ in iter_array_items(chats_path, "", span=run)]
    assert len(chunks) >= 4 and all(c.items for c in chunks)
    assert sorted(read) == list(range(len(chats)))


def _copies(path: Path, n: int, vary: Any) -> list[list[str]]:
    """``n`` copies of a sample log's records, each passed through ``vary(text, k)`` (renamed ids, other texts)."""
    text = path.read_text(encoding="utf-8")
    return [vary(text, k).splitlines() for k in range(n)]


def _vary_responses(text: str, k: int) -> str:
    """Copy ``k`` of the Responses sample log: its own response ids; some copies another conversation."""
    text = text.replace('"resp_a1"', f'"resp_a1_{k}"').replace('"resp_a2"', f'"resp_a2_{k}"')
    text = text.replace('"resp_b1"', f'"resp_b1_{k}"').replace("call_lh", f"call_lh_{k}")
    if k % 3 == 1:  # another conversation: other first user message
        text = text.replace("Is LH1172 on time?", f"Is LH{1000 + k} on time?")
    if k % 4 == 2:  # instructions changed in the continuing call only
        lines = text.splitlines()
        lines[1] = lines[1].replace("You are a flight-status bot.", "Be brief.")
        text = "\n".join(lines) + "\n"
    return text  # k % 3 != 1: the same conversation key as copy 0, so the reader joins them in one graph


def test_responses_call_chains_in_chunks(tmp_path: Path) -> None:
    """``previous_response_id`` chains: a call's history lives in an earlier response, so chains stay together,
    and calls land in the graph of their conversation key even when their instructions changed mid-chain."""
    sample = Path(__file__).resolve().parents[1] / "sample_logs" / "openai_responses" / "calls.jsonl"
    vary = _vary_responses
    lines = _interleave(_copies(sample, 24, vary), seed=3)
    lines.insert(9, '{"request": {"input": [')
    path = tmp_path / "responses.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert detect_format(path).name == "openai_responses"
    samples, stats, rejects = _whole_vs_chunks(path, path.stat().st_size // 6, min_chunks=2)
    assert len(rejects) == 1 and stats.records_read == 73 and samples


def test_anthropic_request_response_pairs_in_chunks(tmp_path: Path) -> None:
    sample = Path(__file__).resolve().parents[1] / "sample_logs" / "anthropic" / "request_response.jsonl"
    first_user = json.loads(sample.read_text().splitlines()[0])["request"]["messages"][0]["content"]
    assert isinstance(first_user, str)

    def vary(text: str, k: int) -> str:
        if k % 2:
            text = text.replace(json.dumps(first_user)[1:-1], f"{first_user} (case {k})")
        return text.replace('"session_id": "', f'"session_id": "{k}-')

    lines = _interleave(_copies(sample, 20, vary), seed=4)
    path = tmp_path / "anthropic.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert detect_format(path).name == "anthropic"
    samples, stats, _ = _whole_vs_chunks(path, path.stat().st_size // 6)
    assert stats.records_read == 80 and samples
