"""The mapping language's alternatives and uncapped extras (msgtrain/ingest/structure/mapping.py; docs/formats.md,
"The mapping language").

- ``messages: [conversations, messages]``: each record is read from the first alternative it holds, so one mapping
  reads LLaMA-Factory's ShareGPT records (``conversations`` of ``{from, value}``) and its v1 records (``messages`` of
  ``{role, content}``) in one file, as LLaMA-Factory's own loaders do.
- ``extras: all``: every field beside the conversation reaches the rows whatever its size (tau-bench's ``info`` is
  several KiB); the default leaves objects over 4 KiB of JSON out.

Records are written in the shapes of LLaMA-Factory's data/glaive_toolcall_en_demo.json and
data/reason_tool_use_demo_50.jsonl (hiyouga/LLaMA-Factory) and of tau-bench's historical trajectories
(sierra-research/tau-bench, historical_trajectories/*.json); the data is made up here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from msgtrain.errors import ConfigError
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject
from msgtrain.ingest.structure.mapping import MAX_EXTRA_JSON, parse_mapping
from msgtrain.ingest.structure.structural import StructuralReader
from msgtrain.model.message import TextPart

SHAREGPT = {
    "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"}],
    "system": "Be brief.",
}
LLAMAFACTORY_V1 = {
    "messages": [
        {"role": "user", "content": [{"type": "text", "value": "2+2?"}]},
        {"role": "assistant", "content": [{"type": "reasoning", "value": "add"}, {"type": "text", "value": "4"}]},
    ]
}
BOTH = {"formatting": "sharegpt", "columns": {"messages": ["conversations", "messages"], "system": "system"}}


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _read(path: Path, mapping: dict[str, Any]) -> list[Any]:
    return list(read_events(StructuralReader(parse_mapping(mapping)), path, forced=True))


def _texts(event: ReadGraph) -> list[tuple[str, str]]:
    out = []
    for node in event.graph.nodes.values():
        parts = getattr(node.message, "parts", ())
        out.append((node.message.role, "".join(p.text for p in parts if isinstance(p, TextPart))))
    return out


def test_a_column_of_alternatives_reads_each_record_from_the_first_it_holds(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "mixed.jsonl", [SHAREGPT, LLAMAFACTORY_V1])
    events = _read(path, BOTH)
    assert [type(e).__name__ for e in events] == ["ReadGraph", "ReadGraph"]
    first, second = events
    assert _texts(first) == [("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello!")]
    assert _texts(second) == [("user", "2+2?"), ("assistant", "4")]
    assert first.extras == {} and second.extras == {}  # the columns read are not extras, whichever was read
    # one path alone reads only the records that hold it: the other record is a reject, not a guess
    only = _read(path, {**BOTH, "columns": {"messages": "conversations", "system": "system"}})
    assert isinstance(only[0], ReadGraph) and isinstance(only[1], ReadReject)


def test_alternatives_are_tried_in_order_and_none_of_them_is_carried_to_the_rows(tmp_path: Path) -> None:
    record = {**SHAREGPT, "system": None, "system_prompt": "From the second path.", "note": "kept"}
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    empty_tools = {**SHAREGPT, "system_prompt": "not read", "tools": [], "functions": tools, "label": "math"}
    path = _jsonl(tmp_path / "one.jsonl", [record, empty_tools, {**SHAREGPT, "label": False, "kto_tag": True}])
    mapping = {
        "formatting": "sharegpt",
        "columns": {
            "messages": "conversations",
            "system": ["system", "system_prompt"],
            "tools": ["tools", "functions"],
            "kto_tag": ["kto_tag", "label"],
        },
    }
    null_system, both, labelled = _read(path, mapping)
    assert _texts(null_system)[0] == ("system", "From the second path.")  # a null is not a text: the next is tried
    assert null_system.extras == {"note": "kept"}
    assert _texts(both)[0] == ("system", "Be brief.")
    assert both.extras == {"label": "math"}  # not a boolean: no label, and a field like any other
    assert [t["function"]["name"] for t in both.graph.env.tools] == ["f"]  # empty tools are none: functions are read
    reply = list(labelled.graph.nodes.values())[-1]
    assert reply.message.metadata["label"] is True  # kto_tag, the first boolean
    assert labelled.extras == {"label": True, "kto_tag": True}  # the label's fields stay, and it is the rows' label


def test_a_mapping_with_alternatives_prints_and_reads_back_as_it_was_written() -> None:
    mapping = parse_mapping({**BOTH, "extras": "all"})
    assert mapping.to_data()["columns"]["messages"] == ["conversations", "messages"]
    assert mapping.to_data()["extras"] == "all"
    again = parse_mapping(mapping.to_data())
    assert again == mapping
    axolotl = parse_mapping({"field_messages": ["conversations", "messages"], "field_system": "system"})
    assert axolotl.alternatives == {"messages": ("conversations", "messages")}
    assert parse_mapping({"field_messages": "messages"}).alternatives == {}
    assert parse_mapping({"field_messages": ["messages"]}).alternatives == {"messages": ("messages",)}


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"columns": {"messages": []}}, "lists no path"),
        ({"columns": {"messages": ["history[].messages", "messages"]}}, "alternatives are paths without []"),
        ({"columns": {"messages": ["messages", 3]}}, "columns.messages[1] must be a field name"),
        ({"extras": "big"}, "extras must be one of small, all"),
    ],
)
def test_a_mapping_that_misuses_alternatives_or_extras_is_an_error_naming_the_key(
    data: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigError, match=says.replace("[", r"\[").replace("]", r"\]")):
        parse_mapping({"formatting": "sharegpt", **data})


def _trajectory(info_bytes: int) -> dict[str, Any]:
    return {
        "task_id": 7,
        "reward": 1.0,
        "info": {"task": {"user_id": "mia_li_3568"}, "notes": "x" * info_bytes},
        "traj": [{"role": "user", "content": "Cancel my trip."}, {"role": "assistant", "content": "Done."}],
        "trial": 0,
    }


def test_extras_all_carries_every_field_beside_the_conversation_whatever_its_size(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "traj.jsonl", [_trajectory(MAX_EXTRA_JSON), _trajectory(10)])
    mapping = {"formatting": "sharegpt", "columns": {"messages": "traj"}}
    capped = [e.extras for e in _read(path, mapping)]
    assert [sorted(x) for x in capped] == [["reward", "task_id", "trial"], ["info", "reward", "task_id", "trial"]]
    whole = [e.extras for e in _read(path, {**mapping, "extras": "all"})]
    assert whole[0]["info"] == _trajectory(MAX_EXTRA_JSON)["info"]
    assert whole[1] == capped[1]  # small fields are carried alike


def test_dollar_names_a_record_that_is_itself_the_message_list(tmp_path: Path) -> None:
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    array = tmp_path / "one_conversation.json"
    array.write_text(json.dumps(chat), encoding="utf-8")
    lists = _jsonl(tmp_path / "lists.jsonl", [chat, {"messages": chat, "id": 7}])
    lines = _jsonl(tmp_path / "lines.jsonl", chat)
    mapping = {"formatting": "sharegpt", "columns": {"messages": ["messages", "$"]}}
    for path, records in ((array, ["file"]), (lists, ["line 1", "line 2"]), (lines, ["line 1"])):
        events = _read(path, mapping)
        assert [e.source.record for e in events] == records, path.name
        assert all(isinstance(e, ReadGraph) and _texts(e) == [("user", "Hi"), ("assistant", "Hello!")] for e in events)
    assert _read(lists, mapping)[1].extras == {"id": 7}
    without = _read(array, {"formatting": "sharegpt", "columns": {"messages": "messages"}})
    assert [(type(e).__name__, getattr(e, "error", None) and e.error.code) for e in without] == [
        ("ReadReject", "not_a_conversation")
    ]
