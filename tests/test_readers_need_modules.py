"""Each format reader is a module because a mapping cannot state its format (issue #36, item 9).

A reader whose files the structural reader reads into the same graphs (ids, nodes, origins, messages, tools,
engine facts), the same extras (what reaches the rows' metadata), the same rejects and the same skips would be a
mapping, not code. For every registered reader this reads the example ``msgtrain formats`` lists, and the real
files of its format in ../shared, both ways: with the reader, and with the structural reader (with the mapping it
finds by itself, and with the closest hand-written mapping where one was tried). A reader passes when each mapping
reads one of those files differently; the test fails, naming the reader, when one mapping reads them all alike, so
a change that makes the structural reader read a format exactly as its reader does says that the reader can become
a mapping. The difference each reader shows is listed in docs/formats.md ("Why each reader is code").

Graph metadata that only names the reader or the variant (``source_format`` / ``format``, ``dialect``, the
structural reader's ``layout``, the message list's key) is left out of the comparison: a mapping shipped under the
reader's name would set it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.catalog import FORMATS
from msgtrain.ingest.catalog import READERS as CATALOGUE
from msgtrain.ingest.core.base import ReadEvent, ReadGraph, ReadReject, ReadSkip
from msgtrain.ingest.registry import get_reader
from msgtrain.ingest.structure.mapping import parse_mapping
from msgtrain.ingest.structure.shipped import PREFIX as SHIPPED
from msgtrain.ingest.structure.structural import StructuralReader
from msgtrain.model.message import OptionCallMessage
from tests.conftest import ROOT, shared_path

# Graph metadata naming the reader, not the conversation.
_NAMING_KEYS = frozenset({"source_format", "format", "layout", "dialect", "messages_key"})

# The closest mapping written by hand for the readers whose example the found mapping reads nearly alike (the
# same messages, other ids or extras). Each is what a shipped mapping of that format would say.
_MESSAGES = {"formatting": "sharegpt", "columns": {"messages": "messages"}}
HAND_WRITTEN = {
    "go_agent": {**_MESSAGES, "tags": {"role_tag": "role", "content_tag": "content"}},
    "sharegpt": {
        "formatting": "sharegpt",
        "columns": {"messages": "conversations", "system": "system", "tools": "tools"},
        "tags": {
            "role_tag": "from",
            "content_tag": "value",
            "user_tag": "human",
            "assistant_tag": "gpt",
            "observation_tag": "observation",
            "function_tag": "function_call",
            "system_tag": "system",
        },
    },
    "mini_swe_agent": {**_MESSAGES, "tags": {"role_tag": "role", "content_tag": "content"}},
    "tau2_bench": {"formatting": "sharegpt", "columns": {"messages": "simulations[].messages"}},
    "verifiers": {"formatting": "prompt_completion", "columns": {"prompt": "prompt", "completion": "completion"}},
}


def _canonical(event: ReadEvent) -> tuple[Any, ...]:
    """What of an event reaches the rows and the books (module docstring)."""
    if isinstance(event, ReadGraph):
        records = []
        for record in event.graph.records():
            if record["type"] == "graph":
                record = {**record, "metadata": {k: v for k, v in record["metadata"].items() if k not in _NAMING_KEYS}}
            records.append(record)
        return ("graph", event.records, json.dumps(event.extras, sort_keys=True, default=str), records)
    if isinstance(event, ReadReject):
        return ("reject", event.source.record, event.error.code, event.count)
    assert isinstance(event, ReadSkip)
    return ("skip", event.source.record, event.reason, event.count)


def first_difference(a: list[ReadEvent], b: list[ReadEvent]) -> str | None:
    """The first way the reader's events ``a`` and the structural reader's ``b`` differ, or None."""
    ca, cb = [_canonical(e) for e in a], [_canonical(e) for e in b]
    for i, (x, y) in enumerate(zip(ca, cb, strict=False)):
        if x != y:
            return f"event {i}: {str(x)[:200]} != {str(y)[:200]}"
    if len(ca) != len(cb):
        return f"{len(ca)} events != {len(cb)} events"
    return None


# The reader modules: neither the structural reader nor a shipped mapping (a format that already is data).
_MODULES = {name for name, module, *_ in CATALOGUE if not module.startswith(SHIPPED)}
READERS = [(name, example) for name, _, example in FORMATS if name in _MODULES and name != "structural"]

# Real files of a format in ../shared (real_logs/<folder>/<file>), read both ways as the example is.
REAL_FILES = {
    "tau2_bench": [("tau2_bench", "airline_run1.first10.json")],
}


@pytest.mark.parametrize(("name", "example"), READERS, ids=[name for name, _ in READERS])
def test_the_structural_reader_does_not_read_a_readers_files_as_the_reader_does(name: str, example: str) -> None:
    path = ROOT / example
    assert path.exists(), f"{name}: its example {example} is missing"
    own = list(read_events(get_reader(name), path))
    assert any(isinstance(e, ReadGraph) for e in own), f"{name} reads no conversation from its own example"
    readings = {"the mapping it finds": StructuralReader()}
    if name in HAND_WRITTEN:
        readings["the hand-written mapping"] = StructuralReader(parse_mapping(HAND_WRITTEN[name]))
    for how, structural in readings.items():
        if first_difference(own, list(read_events(structural, path, forced=True))) is not None:
            continue
        # the example reads alike: the real files decide
        files = [shared_path("real_logs", *where) for where in REAL_FILES.get(name, [])]
        assert any(
            first_difference(list(read_events(get_reader(name), f)), list(read_events(structural, f, forced=True)))
            is not None
            for f in files
        ), (
            f"the structural reader with {how} reads {example} and the real files exactly as the {name} reader "
            f"does: {name} can be a mapping (docs/formats.md, 'Why each reader is code')"
        )


def test_the_comparison_finds_equal_readings_equal(tmp_path: Path) -> None:
    """The oracle itself: the structural reader against itself agrees, and one changed extra is a difference."""
    path = tmp_path / "chats.jsonl"
    path.write_text(
        json.dumps({"id": 1, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
        + "\n",
        encoding="utf-8",
    )
    once = list(read_events(StructuralReader(), path, forced=True))
    again = list(read_events(StructuralReader(parse_mapping(_MESSAGES)), path, forced=True))
    assert first_difference(once, again) is None
    (graph,) = [e for e in again if isinstance(e, ReadGraph)]
    graph.extras["id"] = 2
    assert first_difference(once, again) is not None


def _conversation(event: ReadGraph) -> list[Any]:
    """A graph's nodes with the call ids numbered in order of appearance and results' ``name`` left out: what the
    chat template renders (the demo template, and LLaMA-Factory's, render neither)."""
    ids: dict[str, str] = {}
    out = []
    for node in event.graph.nodes.values():
        text = json.dumps(node.message.model_dump(mode="json", exclude={"name"}), sort_keys=True)
        for logged in re.findall(r'"invocation_id": "([^"]*)"', text):
            ids.setdefault(logged, f"call_{len(ids)}")
        text = re.sub(r'"invocation_id": "([^"]*)"', lambda m: f'"invocation_id": "{ids[m.group(1)]}"', text)
        out.append((node.origin.value, text))
    return out


def test_the_llamafactory_mapping_reads_real_glaive_data_as_the_sharegpt_reader_does() -> None:
    # The format's shipped mapping (msgtrain/ingest/mappings/sharegpt.json, which replaced the sharegpt reader: its
    # rows are pinned in tests/test_shipped_mappings.py) and the LLaMA-Factory dataset_info mapping a user writes read
    # the glaive tool-call demo alike: every conversation, tool calls and results included, call ids and graph ids
    # too (a call without an id is call_<message>_<k>).
    path = shared_path("real_logs", "sharegpt_llamafactory", "glaive_toolcall_en_demo.json")
    own = [e for e in read_events(get_reader("sharegpt"), path) if isinstance(e, ReadGraph)]
    mapped = StructuralReader(parse_mapping(HAND_WRITTEN["sharegpt"]))
    found = [e for e in read_events(mapped, path, forced=True) if isinstance(e, ReadGraph)]
    assert len(own) == len(found) == 300
    calls = 0
    for a, b in zip(own, found, strict=True):
        assert a.source.record == b.source.record and a.extras == b.extras
        assert _conversation(a) == _conversation(b), a.source
        calls += sum(isinstance(n.message, OptionCallMessage) for n in a.graph.nodes.values())
    assert calls > 100  # the file's tool calls were compared, not only its plain replies
    assert first_difference(own, found) is None  # the graphs are the same, ids included


def test_the_structural_reader_reads_llamafactory_v1_typed_messages_as_the_sharegpt_reader_does() -> None:
    # LLaMA-Factory v1's typed parts (data/reason_tool_use_demo_50.jsonl): reasoning, tool_call and text parts hold
    # their text under "value"; the structural reader used to drop the reasoning, refuse the tool_call parts and give
    # one result of two parallel calls to the first call. The mapping it finds by itself reads every conversation as
    # the shipped sharegpt mapping does.
    path = shared_path("real_logs", "sharegpt_llamafactory", "reason_tool_use_demo_50.jsonl")
    own = list(read_events(get_reader("sharegpt"), path))
    found = list(read_events(StructuralReader(), path, forced=True))
    assert sum(isinstance(e, ReadGraph) for e in own) == 50
    assert first_difference(own, found) is None


def test_docs_say_for_every_reader_what_a_mapping_cannot_state() -> None:
    text = (ROOT / "docs" / "formats.md").read_text(encoding="utf-8")
    section = text[text.index("## Why each reader is code") :]
    listed = re.findall(r"^\| `([a-z0-9_]+)` \| ", section, re.M)
    assert sorted(listed) == sorted(name for name, _ in READERS), "list each reader in docs/formats.md's table"
