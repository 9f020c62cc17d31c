"""Shipped mappings (msgtrain/ingest/mappings/*.json, msgtrain/ingest/structure/shipped.py): formats that are data.

A reader moved to a shipped mapping only where the mapping reads every file of its format that the repository and
../shared hold into the rows the reader gave (issue #36, item 9). Two tests say so:

- against the reader itself: the reader's module at the commit before it was removed (:data:`MOVED`) is checked out
  into a temporary folder (``git archive``) and run in a subprocess over the format's files (:data:`FILES`), and the
  rows it gives (every sample's token ids, labels and metadata, the books, the reject lines) and its read events
  (graphs, extras, rejects, skips) are compared with the shipped mapping's, file by file;
- for good: the read events the reader gave, recorded as digests (:data:`EVENTS`, written by that same check), and
  the samples and trained turns of each example, which the shipped mapping must keep giving.

The mechanism: the catalogue lists a shipped mapping like a reader (``msgtrain formats``), detection asks it only
where its marks admit a file, and it reads through the same fault boundary.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest

from msgtrain.errors import ConfigError
from msgtrain.ingest import catalog, registry
from msgtrain.ingest.core.base import read_head
from msgtrain.ingest.detect import detect_format
from msgtrain.ingest.structure.shipped import MAPPINGS, PREFIX, ShippedReader, shipped_reader
from tests.conftest import ROOT, SHARED

# A moved reader: (its module's path, the last commit that holds it).
MOVED = {
    "sharegpt": ("msgtrain/ingest/formats/chats/sharegpt.py", "c23c91a"),
    "openai_chat": ("msgtrain/ingest/formats/api/openai_chat.py", "5800b08"),
}

# Every file of the format in the repository and ../shared (what detection gave the reader before it moved):
# repository paths, or ../shared paths starting with "shared/".
FILES = {
    "sharegpt": [
        "sample_logs/sharegpt/glaive_style.json",
        "sample_logs/sharegpt/llamafactory_messages.jsonl",
        "shared/real_logs/sharegpt_llamafactory/glaive_toolcall_en_demo.json",
        "shared/real_logs/sharegpt_llamafactory/reason_tool_use_demo_50.jsonl",
    ],
    "openai_chat": [
        "sample_logs/openai_chat/conversations.jsonl",
        "shared/real_logs/tau_bench/gpt-4o-airline.first20.json",
    ],
}

# What each file gave with the reader: the sha256 of its read events (DIGESTS' canonical events) and its number of
# samples, recorded by test_a_moved_readers_files_read_into_the_same_rows_by_its_shipped_mapping (it prints them on
# a mismatch).
EVENTS: dict[str, dict[str, Any]] = {
    "sample_logs/sharegpt/glaive_style.json": {
        "events": "023918369c3ab5f91a364522d250d067bbae825f977bcc35d76b248ef6a614fd",
        "samples": 3,
    },
    "sample_logs/sharegpt/llamafactory_messages.jsonl": {
        "events": "51388b764f73bad1632bb58d63a67c3c8b11699eb94eadfb5af605e843f59efe",
        "samples": 2,
    },
    "shared/real_logs/sharegpt_llamafactory/glaive_toolcall_en_demo.json": {
        "events": "acd2c2f80c75699fd487d467ccc51153089217efc6615d843fcf81d8bc460e7c",
        "samples": 300,
    },
    "shared/real_logs/sharegpt_llamafactory/reason_tool_use_demo_50.jsonl": {
        "events": "91ddbc2567f0ee3732a6d47f728e4b60553706b40db7dea5d6d35dcea044ef0e",
        "samples": 50,
    },
    "sample_logs/openai_chat/conversations.jsonl": {
        "events": "03a01f5bd79608a4083ba13c4904d62d9ef0a6bd96e47adde6f0606789cb1195",
        "samples": 4,
    },
    "shared/real_logs/tau_bench/gpt-4o-airline.first20.json": {
        "events": "86317e3f6de924d04cd131e4390b3df8b8d29c3275bd4ba67fdbe0299492bd4c",
        "samples": 20,
    },
}

# What the rows and the books hold, as digests: run both by the code under test and by the reader's checkout.
DIGESTS = r"""
import dataclasses, hashlib, json, sys
from pathlib import Path
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph, ReadReject
from msgtrain.ingest.registry import get_reader
from msgtrain.run.parts import LinearizeSettings, convert_file

NAMING = {"source_format", "format", "layout", "dialect", "messages_key"}  # name the reader, not the conversation
LATER_COUNTERS = {"history_copies"}


def canonical(event):
    if isinstance(event, ReadGraph):
        records = []
        for r in event.graph.records():
            if r["type"] == "graph":
                r = {**r, "metadata": {k: v for k, v in r["metadata"].items() if k not in NAMING}}
            records.append(r)
        return ["graph", event.records, event.extras, records]
    if isinstance(event, ReadReject):
        return ["reject", event.source.record, event.error.code, event.count, event.turns]
    return ["skip", event.source.record, event.reason, event.count]


def plain(value):
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def digest(value, path):
    text = json.dumps(plain(value), sort_keys=True, default=str).replace(str(path.parent), "<dir>")
    return hashlib.sha256(text.encode()).hexdigest()


def rows(path, name):
    settings = LinearizeSettings(
        tokenizer=None, chat_template=None, policies=(), render_date="2025-01-01", input_format=name
    )
    samples, stats, rejects = convert_file(path, settings)
    shown = [dataclasses.asdict(s) for s in samples]
    # counters the stats gained after a reader moved say nothing while they are 0 (the old tree has no such field)
    counted = {k: v for k, v in dataclasses.asdict(stats).items() if not (k in LATER_COUNTERS and v == 0)}
    return {"samples": shown, "stats": counted, "rejects": rejects}, len(samples)


def main(pairs):
    out = {}
    for name, file in pairs:
        path = Path(file)
        events = [canonical(e) for e in read_events(get_reader(name), path)]
        table, count = rows(path, name)
        out[file] = {"events": digest(events, path), "rows": digest(table, path), "samples": count}
    return out
"""
MAIN = """
print(json.dumps(main(json.loads(sys.argv[1]))))
"""


def _where(file: str) -> Path:
    return SHARED / file.removeprefix("shared/") if file.startswith("shared/") else ROOT / file


def _present(name: str) -> list[tuple[str, str]]:
    return [(name, str(_where(f))) for f in FILES[name] if _where(f).exists()]


def _digests(pairs: list[tuple[str, str]], tree: Path) -> dict[str, Any]:
    """DIGESTS of the files run by the package in ``tree`` (a checkout of another commit), in a process of its own."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code = (
        f"import msgtrain, sys\nassert msgtrain.__file__.startswith({str(tree)!r}), msgtrain.__file__\n{DIGESTS}{MAIN}"
    )
    proc = subprocess.run(  # run in ``tree``: python -c puts the working directory first on the path
        [sys.executable, "-c", code, json.dumps(pairs)], capture_output=True, text=True, env=env, timeout=600, cwd=tree
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


Digests = Callable[[str, str], dict[str, Any]]


@pytest.fixture(scope="module")
def digests_now() -> Digests:
    """``digests(name, file)``: DIGESTS of a file read by the code under test, in this process, computed once per
    module: the test of a moved reader compares them with its checkout's and the test of each file with EVENTS (a
    conversion of each file, not one in a subprocess and another here)."""
    here: dict[str, Any] = {}
    exec(DIGESTS, here)
    done: dict[str, dict[str, Any]] = {}

    def digests(name: str, file: str) -> dict[str, Any]:
        if file not in done:
            done[file] = here["main"]([(name, file)])[file]
        return done[file]

    return digests


def _checkout(commit: str, into: Path) -> Path:
    """The package as it was at ``commit`` (skips where the repository's history is not at hand)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("no git history here: the moved reader's commit cannot be checked out")
    proc = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "msgtrain"], capture_output=True, timeout=120)
    if proc.returncode != 0:
        pytest.skip(f"commit {commit} is not in this clone's history: {proc.stderr.decode()[-200:]}")
    with tarfile.open(fileobj=BytesIO(proc.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


@pytest.mark.parametrize("name", sorted(MOVED))
def test_a_moved_readers_files_read_into_the_same_rows_by_its_shipped_mapping(
    name: str, tmp_path: Path, digests_now: Digests
) -> None:
    module, commit = MOVED[name]
    assert not (ROOT / module).exists(), f"{module} is still there: the reader did not move"
    old_tree = _checkout(commit, tmp_path / "before")
    assert (old_tree / module).exists(), f"{commit} does not hold {module}"
    pairs = _present(name)
    assert pairs, f"none of {name}'s files is here"
    before = _digests(pairs, old_tree)
    now = {file: digests_now(reader, file) for reader, file in pairs}
    recorded = {
        f: {k: before[str(_where(f))][k] for k in ("events", "samples")} for f in FILES[name] if _where(f).exists()
    }
    for _, file in pairs:
        assert now[file] == before[file], f"{file}: the shipped {name} mapping reads it otherwise than the reader did"
    assert all(EVENTS.get(f) == d for f, d in recorded.items()), f"EVENTS for {name} should be {recorded}"


def test_every_shipped_mapping_is_listed_by_the_catalogue_and_detected_on_its_files() -> None:
    shipped = {row[0] for row in catalog.READERS if row[1].startswith(PREFIX)}
    assert shipped == {p.stem for p in MAPPINGS.glob("*.json")}, "list every mapping file in the registry's MODULES"
    assert set(MOVED) <= shipped
    listed = {name for name, _, _ in catalog.FORMATS}
    assert shipped <= listed
    for name in shipped:
        reader = registry.get_reader(name)
        assert isinstance(reader, ShippedReader) and reader.name == name
        assert "fallback" not in next(e.traits for e in registry.entries() if e.name == name)
    for name, files in FILES.items():
        for file in files:
            path = _where(file)
            if path.exists():
                assert detect_format(path).name == name, file
                assert registry.get_reader(name).detect(path, read_head(path))


def test_the_formats_command_lists_a_shipped_mapping_like_a_reader(capsys: pytest.CaptureFixture[str]) -> None:
    from msgtrain.cli import main

    assert main(["formats", "--json"]) == 0
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    for name in (row[0] for row in catalog.READERS if row[1].startswith(PREFIX)):
        reader = shipped_reader(name)
        assert listed[name] == {"name": name, "description": reader.description, "example": reader.example}


@pytest.mark.parametrize("file", sorted(EVENTS))
def test_a_shipped_mapping_reads_its_formats_files_into_the_events_the_reader_gave(
    file: str, digests_now: Digests
) -> None:
    path = _where(file)
    if not path.exists():
        pytest.skip(f"{file} not present (../shared ships beside the checkout in CI)")
    name = next(n for n, files in FILES.items() if file in files)
    got = digests_now(name, str(path))  # in this process: the code under test, as the checkouts' subprocess runs it
    assert {k: got[k] for k in ("events", "samples")} == EVENTS[file], (
        f"{file}: the shipped {name} mapping reads it otherwise than the reader did"
    )


def test_a_shipped_mapping_file_with_a_wrong_key_or_shape_is_an_error_naming_it(tmp_path: Path) -> None:
    spec: dict[str, Any] = {
        "name": "demo",
        "description": "a demo",
        "example": "sample_logs/sharegpt/glaive_style.json",
        "marks": ['"from"'],
        "detect": [[".conversations[].from"]],
        "mapping": {"formatting": "sharegpt", "columns": {"messages": "conversations"}},
    }
    assert ShippedReader(spec, "demo.json").name == "demo"
    with pytest.raises(ConfigError, match="unknown key 'detector'"):
        ShippedReader({**spec, "detector": []}, "demo.json")
    with pytest.raises(ConfigError, match="a shape is a list of paths or an object"):
        ShippedReader({**spec, "detect": [{"has": [".x"], "without": [".y"]}]}, "demo.json")
    with pytest.raises(ConfigError, match="detect lists the head shapes"):
        ShippedReader({**spec, "detect": []}, "demo.json")
    with pytest.raises(ConfigError, match="unknown mapping key"):  # parsed when a file is first read
        _ = ShippedReader({**spec, "mapping": {"colums": {}}}, "demo.json").structural
    assert shipped_reader("sharegpt") is shipped_reader("sharegpt")  # read once per process


def test_detecting_with_a_shipped_mapping_imports_neither_the_structural_reader_nor_yaml() -> None:
    # "role" is in every chat log: openai_chat is a candidate for most files, so its detection must stay light
    code = (
        "import sys, json\n"
        "from pathlib import Path\n"
        "from msgtrain.ingest.registry import get_reader\n"
        "from msgtrain.ingest.core.base import read_head\n"
        "p = Path(sys.argv[1])\n"
        "assert get_reader('openai_chat').detect(p, read_head(p))\n"
        "print(json.dumps([m for m in ('yaml', 'msgtrain.ingest.structure.structural') if m in sys.modules]))\n"
    )
    path = ROOT / "sample_logs" / "openai_chat" / "conversations.jsonl"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize(
    ("kind", "modality"),
    [("image_url", "image"), ("image", "image"), ("video_url", "video"), ("video", "video"), ("audio_url", "audio")],
)
def test_llamafactory_v1_media_parts_of_each_type_are_media_references(
    tmp_path: Path, kind: str, modality: str
) -> None:
    # hiyouga/LLaMA-Factory v1 (src/llamafactory/v1/core/rendering/format.py): a media part holds its path under
    # "value", as text parts do; the sharegpt reader read them so, and the shipped mapping must too.
    from msgtrain.ingest.boundary import read_events
    from msgtrain.ingest.core.base import ReadGraph
    from msgtrain.model.message import MediaPart

    record = {
        "messages": [
            {"role": "user", "content": [{"type": kind, "value": "data/1.bin"}, {"type": "text", "value": "Who?"}]},
            {"role": "assistant", "content": [{"type": "text", "value": "Kane."}]},
        ]
    }
    path = tmp_path / "v1.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    assert detect_format(path).name == "sharegpt"
    (event,) = read_events(registry.get_reader("sharegpt"), path)
    assert isinstance(event, ReadGraph)
    media = [p for n in event.graph.nodes.values() for p in getattr(n.message, "parts", ()) if isinstance(p, MediaPart)]
    assert [(m.modality, m.url) for m in media] == [(modality, "data/1.bin")]


def test_a_shipped_mapping_explains_where_the_values_it_reads_sit_in_a_file_it_refuses(tmp_path: Path) -> None:
    # the unknown_format hint names the closest readers and why they refused (msgtrain.ingest.detect); the
    # openai_chat mapping says where OpenAI-role messages are, as the reader it replaced did
    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps({"request": {"messages": [{"role": "user", "content": "hi"}]}}), encoding="utf-8")
    roles = tmp_path / "roles.json"
    roles.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "bot", "content": "yo"}]}))
    reader = registry.get_reader("openai_chat")
    assert reader.explain(nested, read_head(nested)) == (  # type: ignore[attr-defined]
        "messages are under `request.messages`, not at the top or under `messages` / `traj`"
    )
    assert reader.explain(roles, read_head(roles)) == (  # type: ignore[attr-defined]
        "roles 'bot' at `messages[].role` are not among those it reads"
    )
    traits = {e.name: e.traits for e in registry.entries()}
    assert "explain" in traits["openai_chat"] and "explain" not in traits["sharegpt"]
