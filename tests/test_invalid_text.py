"""Lone UTF-16 surrogates are a specific reject at ingest (``invalid_text``, naming the field and the line), never an
``internal_error`` of the tokenizer or a crash of the Arrow or rejects writers.

A JSON ``"\\ud800"`` escape without its pair, or a non-UTF-8 byte decoded with ``surrogateescape`` (a file name),
gives a string no tokenizer encodes and no UTF-8 file or Arrow column stores. A JSONL line holding one is rejected on
its own (the rest of its session still reads); anything else a reader builds is checked per graph at the fault
boundary.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from msgtrain.cli import main
from msgtrain.errors import MsgtrainError, printable
from msgtrain.run.parts import LinearizeSettings, convert_file
from msgtrain.tools.validate_cmd import validate_inputs
from tests.conftest import ROOT

SETTINGS = LinearizeSettings(
    tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=None
)
BAD = "a\ud800b"


def _chat(**extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}], **extra}


def _call(name: str = "f", arguments: str = "{}") -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
            {"role": "assistant", "content": "done"},
        ]
    }


# (record holding a lone surrogate, where the reject must say it is)
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "user content": (
        {"messages": [{"role": "user", "content": BAD}, {"role": "assistant", "content": "ok"}]},
        "messages[0].content",
    ),
    "assistant content": (
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": BAD}]},
        "messages[1].content",
    ),
    "a role": (
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assist" + BAD, "content": "x"}]},
        "messages[1].role",
    ),
    "tool name": (_call(name=BAD), "messages[1].tool_calls[0].function.name"),
    # Arguments are a JSON string in the record: the surrogate appears only once they are parsed into the graph.
    "tool argument value": (_call(arguments=json.dumps({"k": BAD})), "message[1].calls[0].arguments.k"),
    "tool argument key": (_call(arguments=json.dumps({BAD: 1})), "message[1].calls[0].arguments (a key)"),
    "a key": (_chat(metadata={BAD: 1}), "metadata (a key)"),
    "metadata": (_chat(metadata={"k": BAD}), "metadata.k"),
    "record id": (_chat(id=BAD), "id"),
    "message name": (
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok", "name": BAD}]},
        "messages[1].name",
    ),
    "tool schema": (
        _chat(tools=[{"type": "function", "function": {"name": "t", "description": BAD, "parameters": {}}}]),
        "tools[0].function.description",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_lone_surrogate_anywhere_in_a_record_is_an_invalid_text_reject_naming_field_and_line(
    tmp_path: Path, case: str
) -> None:
    record, field = CASES[case]
    path = tmp_path / "chat.jsonl"
    good = _chat()
    path.write_text(
        "".join(json.dumps(r) + "\n" for r in (good, record, good)), encoding="utf-8"
    )  # ensure_ascii: the surrogate is a \ud800 escape, as JSON writers emit it
    samples, stats, rejects = convert_file(path, SETTINGS)
    assert dict(stats.records_rejected) == {"invalid_text": 1}, rejects
    assert stats.records_converted == 2 and len(samples) == 2
    (reject,) = [json.loads(r) for r in rejects]
    assert reject["record"] == "line 2"
    assert reject["where"] == f"{path}:2 {field}"
    assert "lone UTF-16 surrogate U+D800" in reject["message"] and "U+FFFD" in reject["hint"]
    rejects[0].encode("utf-8")
    report = validate_inputs([path])
    assert [p.code for p in report.problems] == ["invalid_text"]


def test_a_lone_surrogate_in_a_session_costs_its_line_not_the_session(tmp_path: Path) -> None:
    lines = (ROOT / "sample_logs" / "claude_code" / "session.jsonl").read_text(encoding="utf-8").splitlines()
    _, before, _ = convert_file(ROOT / "sample_logs" / "claude_code" / "session.jsonl", SETTINGS)
    record = json.loads(lines[3])
    record["message"]["content"] = "bad \udfff text"
    lines[3] = json.dumps(record)
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _, stats, rejects = convert_file(path, SETTINGS)
    assert dict(stats.records_rejected) == {"invalid_text": 1}
    assert json.loads(rejects[0])["record"] == "line 4"
    assert stats.records_converted == before.records_converted - 1


def test_a_lone_surrogate_in_a_json_document_item_costs_that_item(tmp_path: Path) -> None:
    item = {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}
    bad = {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": BAD}]}
    path = tmp_path / "data.json"
    path.write_text(json.dumps([item, bad, item]), encoding="utf-8")
    _, stats, rejects = convert_file(path, SETTINGS)
    assert dict(stats.records_rejected) == {"invalid_text": 1} and stats.records_converted == 2
    (reject,) = [json.loads(r) for r in rejects]
    assert reject["record"] == "item 1" and "message[1]" in reject["where"]


@pytest.mark.skipif(os.name != "posix", reason="file names of arbitrary bytes are a POSIX thing")
def test_a_file_name_that_is_not_utf8_is_an_invalid_text_reject_and_every_command_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    raw_name = os.fsencode(logs) + b"/chat\xff.jsonl"
    with open(raw_name, "wb") as f:
        f.write((json.dumps(_chat()) + "\n" + json.dumps(_chat()) + "\n").encode())
    out = tmp_path / "out"
    # Every record is rejected: the run reads nothing, so it publishes only when asked to (exit 3, partial).
    assert main(["convert", str(logs), "-o", str(out), "--allow-empty"]) == 3
    text = (out / "rejects.jsonl").read_bytes().decode("utf-8")
    reasons = {json.loads(line)["reason"] for line in text.splitlines()}
    assert reasons == {"invalid_text"}
    assert "the file name" in text and "\ufffd" in text
    assert main(["validate", str(logs)]) == 3
    assert main(["validate", str(logs), "--json"]) == 3
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err and "internal error" not in captured.err


def test_error_text_quoting_input_never_carries_a_lone_surrogate() -> None:
    err = MsgtrainError(f"unknown role {BAD!s}", where="x \udcff", hint=BAD)
    assert "\ud800" not in err.message and "\udcff" not in str(err)
    str(err).encode("utf-8")
    assert printable("emoji \U0001f600 kept") == "emoji \U0001f600 kept"


def _nested_values() -> Any:
    """Values shaped like what readers build: dicts (string and integer keys), lists, tuples, number runs, pydantic
    models, dataclasses, and leaves JSON cannot hold (sets, bytes), with lone surrogates or paired ones anywhere."""
    import dataclasses

    from hypothesis import strategies as st
    from pydantic import BaseModel

    class Box(BaseModel):
        a: Any = None
        b: Any = None

    @dataclasses.dataclass
    class Pair:
        x: Any = None
        y: Any = None

    pieces = st.sampled_from(["a", "é", "\U0001f600", "\ud800", "\udfff", "\ud83d\ude00", "<|x|>"])
    text = st.lists(pieces, max_size=4).map("".join)
    leaves = text | st.integers() | st.floats(allow_nan=True) | st.none() | st.booleans()
    leaves = leaves | st.frozensets(st.integers(), max_size=2) | st.binary(max_size=2)
    return st.recursive(
        leaves,
        lambda kids: (
            st.lists(kids, max_size=3)
            | st.tuples(kids, kids)
            | st.dictionaries(text | st.integers(), kids, max_size=3)
            | st.builds(Box, a=kids, b=kids)
            | st.builds(Pair, x=kids, y=kids)
        ),
        max_leaves=12,
    )


def test_the_c_speed_check_never_clears_a_value_the_walk_would_reject() -> None:
    """``surely_clean`` (one ``json.dumps`` + UTF-8 encode) is the fast path of the graph check: whenever it says
    clean, the field-naming walk must find nothing; whenever the walk finds something, it must not say clean."""
    from hypothesis import given, settings

    from msgtrain.ingest.core.text_check import lone_surrogate_field, surely_clean

    seen = {"flagged": 0, "clean": 0}

    @settings(max_examples=400, deadline=None, derandomize=True)
    @given(_nested_values())
    def check(value: Any) -> None:
        found = lone_surrogate_field(iter([("v", value)]))
        if surely_clean([value]):
            assert found is None, found
            seen["clean"] += 1
        elif found is not None:
            seen["flagged"] += 1

    check()
    assert seen["flagged"] > 20 and seen["clean"] > 20, seen  # both branches really ran


def _messages_with(text: str) -> dict[str, Any]:
    """One message (or environment) per place a string can be in a graph, each holding ``text`` there."""
    from msgtrain.model.message import (
        Generation,
        MediaPart,
        OptionCallMessage,
        OptionCallPayload,
        OptionResultMessage,
        OptionResultPayload,
        PartsMessage,
        ReasoningPart,
        TextPart,
    )

    def call(**kw: Any) -> OptionCallMessage:
        return OptionCallMessage(calls=(OptionCallPayload(**{"invocation_id": "c", "option_name": "f", **kw}),))

    def result(**kw: Any) -> OptionResultMessage:
        payload = {"invocation_id": "c", "option_name": "f", **kw.pop("payload", {})}
        return OptionResultMessage(result=OptionResultPayload(**payload), **kw)

    return {
        "text": PartsMessage(parts=(TextPart(text=text),)),
        "reasoning": PartsMessage(parts=(ReasoningPart(text="r", signature=text),)),
        "media": PartsMessage(parts=(MediaPart(modality="image", url=text),)),
        "name": PartsMessage(name=text),
        "policy": PartsMessage(policy=text),
        "metadata value": PartsMessage(metadata={"k": [text]}),
        "metadata key": PartsMessage(metadata={text: 1}),
        "generation": PartsMessage(role_hint_for_llm="assistant", generation=Generation(model=text)),
        "generation sampling key": PartsMessage(generation=Generation(sampling={text: 1})),
        "argument value": call(arguments={"k": {"n": text}}),
        "argument key": call(arguments={text: 1}),
        "raw arguments": call(raw_arguments=text),
        "call id": call(invocation_id=text),
        "result": result(payload={"result": [text]}),
        "error message": result(payload={"error_message": text}),
        "subgraph": result(subgraph={"nodes": [text]}),
        "subgraph key": result(subgraph={text: 1}),
    }


@pytest.mark.parametrize("where", sorted(_messages_with("x")))
def test_the_graph_check_finds_a_lone_surrogate_in_every_field_a_message_hashed_or_not(where: str) -> None:
    """The graph check does not encode again a message's canonical JSON, which its node id already encoded: what that
    JSON leaves out or writes otherwise (metadata, engine facts, a sub-agent's graph, the keys of a call's arguments,
    which pydantic's JSON mode writes with U+FFFD) must still be looked at, for every kind of message."""
    from msgtrain.ingest.core.base import ReadGraph, SourceRef
    from msgtrain.ingest.core.text_check import graph_reject
    from msgtrain.model.graph import MessageGraph
    from msgtrain.model.message import PartsMessage

    clean, bad = _messages_with("plain é text")[where], _messages_with(BAD)[where]
    for message, rejected in ((clean, False), (bad, True)):
        graph = MessageGraph(graph_id="g")
        graph.append(PartsMessage(role_hint_for_llm="user"))
        graph.append(message)
        reject = graph_reject(ReadGraph(graph, SourceRef("f.jsonl", "line 1")))
        assert (reject is not None) == rejected, (where, reject)
        if reject is not None:
            assert reject.error.code == "invalid_text" and "message[1]" in reject.error.message, reject.error.message


def test_the_graph_check_finds_a_lone_surrogate_in_tools_and_in_a_node_it_did_not_hash() -> None:
    """An environment's tools are judged by the JSON its id was hashed from; a node whose message is not the one its
    id was hashed from (a graph loaded from a log, a node replaced) is looked at in full."""
    from dataclasses import replace

    from msgtrain.ingest.core.base import ReadGraph, SourceRef
    from msgtrain.ingest.core.text_check import graph_reject
    from msgtrain.model.graph import MessageGraph
    from msgtrain.model.message import text_message

    tools = [{"type": "function", "function": {"name": "t", "description": BAD, "parameters": {}}}]
    graph = MessageGraph([text_message("user", "hi")], graph_id="g", tools=tools)
    reject = graph_reject(ReadGraph(graph, SourceRef("f.jsonl", "line 1")))
    assert reject is not None and "tools" in reject.error.message, reject

    graph = MessageGraph([text_message("user", "hi")], graph_id="g")
    nid = graph.head[0]
    graph.nodes[nid] = replace(graph.nodes[nid], message=text_message("user", BAD))
    reject = graph_reject(ReadGraph(graph, SourceRef("f.jsonl", "line 1")))
    assert reject is not None and "message[0]" in reject.error.message, reject
