"""``--resume`` publishes exactly what a clean run publishes: a part is reused only when everything that changes its
bytes is unchanged (content, settings, every tokenizer file), its source names where its content is now, and its
files are the ones its worker wrote (checksums).

The property test edits a log folder and a tokenizer folder at random (seeded, a few seconds) and after every step
compares a resumed run with a clean one, byte for byte.
"""

from __future__ import annotations

import io
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from msgtrain.errors import MsgtrainError
from msgtrain.linearize.loading import load_tokenizer
from msgtrain.linearize.tokenizer import CHATML_TEMPLATE, _build_demo_tokenizer
from msgtrain.run.config import ConvertConfig
from msgtrain.run.part_store import SAMPLES_FILE
from msgtrain.run.pipeline import convert
from msgtrain.run.publish import state_dir
from tests.conftest import SAMPLE_LOGS

# Logs whose readers look at nothing but their own file (readers that consult sibling files, such as a Claude Code
# sub-agent's parent session, are keyed through the storage interface: tests/test_storage_protocols.py).
SOURCES = [
    SAMPLE_LOGS / "calls" / "agent_calls.jsonl",
    SAMPLE_LOGS / "openai_chat" / "conversations.jsonl",
    SAMPLE_LOGS / "sharegpt" / "llamafactory_messages.jsonl",
    SAMPLE_LOGS / "native" / "edit_and_compaction.graph.jsonl",
]


def make_tokenizer(folder: Path) -> Path:
    """The demo vocabulary saved as a tokenizer folder, with a template that prints ``bos_token`` (as Llama's do)."""
    hf = _build_demo_tokenizer()
    hf.bos_token = "<|endoftext|>"
    hf.chat_template = "{{ bos_token }}" + CHATML_TEMPLATE
    hf.save_pretrained(folder)
    return folder


def outcome(logs: Path, out: Path, tokenizer: Path, resume: bool) -> dict[str, Any]:
    """Every published file's bytes (or the error the run stopped with)."""
    cfg = ConvertConfig(inputs=[logs], output=out, tokenizer=str(tokenizer), resume=resume, allow_empty=True)
    try:
        convert(cfg)
    except MsgtrainError as e:
        return {"error": (e.code, str(e))}
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def clean_outcome(logs: Path, out: Path, tokenizer: Path) -> dict[str, Any]:
    shutil.rmtree(out.parent, ignore_errors=True)
    out.parent.mkdir(parents=True)
    return outcome(logs, out, tokenizer, resume=False)


def assert_same(resumed: dict[str, Any], clean: dict[str, Any], step: str) -> None:
    assert resumed.keys() == clean.keys(), step
    for name in clean:
        assert resumed[name] == clean[name], f"{name} differs after {step}"


# ------------------------------------------------------------------------------------------------ edits
def _files(logs: Path) -> list[Path]:
    return sorted(p for p in logs.rglob("*") if p.is_file())


def _edit(rng: random.Random, logs: Path, tokenizer: Path) -> str:
    files = _files(logs)
    f = rng.choice(files)
    data = f.read_bytes()
    kind = rng.choice(["edit", "append", "truncate", "rotate", "move", "duplicate", "delete", "tokenizer"])
    if kind == "edit" and data:
        letters = [i for i, b in enumerate(data) if chr(b).isalpha()]
        i = rng.choice(letters)
        f.write_bytes(data[:i] + bytes([data[i] ^ 0x20]) + data[i + 1 :])  # flip a letter's case
    elif kind == "append":
        lines = data.splitlines(keepends=True) or [b"{}\n"]
        f.write_bytes(data + rng.choice(lines).rstrip(b"\n") + b"\n")
    elif kind == "truncate":
        f.write_bytes(data[: rng.randrange(len(data) + 1)])
    elif kind == "rotate":  # app.jsonl -> app.1.jsonl, and a new app.jsonl starts with the old first line
        f.rename(f.with_name(f"{f.stem}.{rng.randrange(100)}{f.suffix}"))
        f.write_bytes(data.splitlines(keepends=True)[0] if data else b"")
    elif kind == "move":
        dest = logs / rng.choice(["archive", "old", "x"]) / f.name
        dest.parent.mkdir(exist_ok=True)
        if not dest.exists():
            f.rename(dest)
    elif kind == "duplicate":
        shutil.copyfile(f, f.with_name(f"copy{rng.randrange(100)}-{f.name}"))
    elif kind == "delete" and len(files) > 1:
        f.unlink()
    elif kind == "tokenizer":
        return _tokenizer_edit(rng, tokenizer)
    return f"{kind} {f.relative_to(logs)}"


def _tokenizer_edit(rng: random.Random, tokenizer: Path) -> str:
    config = tokenizer / "tokenizer_config.json"
    what = rng.choice(["bos_token", "special_tokens_map", "generation_config", "template"])
    if what == "bos_token":
        data = json.loads(config.read_text())
        data["bos_token"] = rng.choice(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
        config.write_text(json.dumps(data))
    elif what == "special_tokens_map":
        bos = rng.choice(["<|endoftext|>", "<|im_start|>"])
        (tokenizer / "special_tokens_map.json").write_text(json.dumps({"bos_token": bos}))
    elif what == "generation_config":
        (tokenizer / "generation_config.json").write_text(json.dumps({"eos_token_id": rng.randrange(3)}))
    else:
        template = tokenizer / "chat_template.jinja"
        template.write_text(template.read_text().replace("{{ bos_token }}", rng.choice(["", "{{ bos_token }}"]), 1))
    return f"tokenizer {what}"


@pytest.mark.parametrize("seed", [0, 1])
def test_resume_equals_a_clean_run_after_any_sequence_of_edits(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    logs = tmp_path / "logs"
    logs.mkdir()
    for source in SOURCES:
        shutil.copyfile(source, logs / source.name)
    tokenizer = make_tokenizer(tmp_path / "tokenizer")
    resumed_out = tmp_path / "resumed" / "out"
    clean_out = tmp_path / "clean" / "out"
    steps: list[str] = []
    outcome(logs, resumed_out, tokenizer, resume=True)
    for _ in range(6):
        steps += [_edit(rng, logs, tokenizer) for _ in range(rng.randint(1, 2))]
        resumed = outcome(logs, resumed_out, tokenizer, resume=True)
        assert_same(resumed, clean_outcome(logs, clean_out, tokenizer), "; ".join(steps))


# ------------------------------------------------------------------------------------------------ single defects
def _logs(tmp_path: Path) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir()
    for source in SOURCES[:2]:
        shutil.copyfile(source, logs / source.name)
    return logs


@pytest.mark.parametrize("where", ["tokenizer_config", "special_tokens_map"])
def test_a_changed_bos_token_is_not_served_from_resumed_parts(tmp_path: Path, where: str) -> None:
    logs, tokenizer = _logs(tmp_path), make_tokenizer(tmp_path / "tokenizer")
    out = tmp_path / "resumed" / "out"
    before = outcome(logs, out, tokenizer, resume=True)
    if where == "tokenizer_config":
        config = tokenizer / "tokenizer_config.json"
        config.write_text(json.dumps({**json.loads(config.read_text()), "bos_token": "<|im_start|>"}))
    else:
        (tokenizer / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<|im_start|>"}))
    after = outcome(logs, out, tokenizer, resume=True)
    clean = clean_outcome(logs, tmp_path / "clean" / "out", tokenizer)
    assert clean != before  # the edit changes the tokens
    assert_same(after, clean, f"bos_token changed in {where}")


def test_generation_config_and_special_tokens_are_in_the_tokenizer_fingerprint(tmp_path: Path) -> None:
    tokenizer = make_tokenizer(tmp_path / "tokenizer")
    seen = {load_tokenizer(str(tokenizer)).fingerprint}
    (tokenizer / "generation_config.json").write_text(json.dumps({"eos_token_id": 1}))
    seen.add(load_tokenizer(str(tokenizer)).fingerprint)
    (tokenizer / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<|im_start|>"}))
    seen.add(load_tokenizer(str(tokenizer)).fingerprint)
    assert len(seen) == 3


@pytest.mark.parametrize("move", ["to another folder", "renamed (rotated)"])
def test_a_moved_renamed_or_rotated_log_names_where_it_is_now(tmp_path: Path, move: str) -> None:
    logs, tokenizer = _logs(tmp_path), make_tokenizer(tmp_path / "tokenizer")
    out = tmp_path / "resumed" / "out"
    outcome(logs, out, tokenizer, resume=True)
    (logs / "archive").mkdir()
    name = "agent_calls.jsonl" if move == "to another folder" else "agent_calls.1.jsonl"
    (logs / "agent_calls.jsonl").rename(logs / "archive" / name)
    cfg = ConvertConfig(inputs=[logs], output=out, tokenizer=str(tokenizer), resume=True)
    # Moved, the part is reused with its sources rewritten; renamed, it is converted again (readers name graphs,
    # and so sample ids, after the file).
    assert convert(cfg)["resume"]["reused"] == (2 if move == "to another folder" else 1)
    after = outcome(logs, out, tokenizer, resume=True)
    assert_same(after, clean_outcome(logs, tmp_path / "clean" / "out", tokenizer), f"a log moved {move}")
    table = pq.read_table(io.BytesIO(after["data/train-00000-of-00001.parquet"]))
    assert any(source.startswith(str(logs / "archive" / name)) for source in table.column("source").to_pylist())


def test_a_flipped_byte_in_a_cached_part_is_recomputed_not_published(tmp_path: Path) -> None:
    logs, tokenizer = _logs(tmp_path), make_tokenizer(tmp_path / "tokenizer")
    out = tmp_path / "resumed" / "out"
    want = outcome(logs, out, tokenizer, resume=True)
    for part in (state_dir(out) / "parts").iterdir():
        arrow = part / SAMPLES_FILE
        data = bytearray(arrow.read_bytes())
        # A byte inside the token ids' buffer: the file stays a valid Arrow file of the right schema.
        data[len(data) // 2] ^= 0x01
        arrow.write_bytes(bytes(data))
    assert_same(outcome(logs, out, tokenizer, resume=True), want, "a flipped byte in every cached part")
