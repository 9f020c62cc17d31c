"""Mistral tokenizers through mistral-common: every trained turn equals ``encode_chat_completion``.

The oracle is mistral-common itself, called directly: a turn's prompt is the encoding of its context (serving
validation), its completion the encoding of context + message (fine-tuning validation) past the prompt. The
tokenizer files are those mistral-common ships in its package data (``mistral_common/data``): tekken
(``tekken_240911.json``), SentencePiece v3 (``mistral_instruct_tokenizer_240323.model.v3``) and v7
(``mistral_instruct_tokenizer_241114.model.v7``), each put in a folder under the name a model repository gives it
(``tekken.json``, ``tokenizer.model.v3``, ``tokenizer.model.v7``), so folder detection is exercised too.
Seeded random agent runs (tool calls with 9-character ids, parallel calls, tool results, edits, compactions, n>1
samples, control-token text in user and tool content) are logged as per-call records and converted by msgtrain.
"""

from __future__ import annotations

import importlib.util
import json
import random
import string
from pathlib import Path
from typing import Any

import pytest

from msgtrain.errors import ConfigError
from msgtrain.export.schema import check_sample, samples_to_table
from msgtrain.linearize import linearize_graph
from msgtrain.linearize.loading import load_tokenizer
from tests.oracle import TOOLS, Call, ExpectedTurn, RunGenerator
from tests.test_linearize_oracle import _graphs_from_records, check_rows

# (folder file name, file in mistral_common/data)
FILES = {
    "tekken": ("tekken.json", "tekken_240911.json"),
    "v3": ("tokenizer.model.v3", "mistral_instruct_tokenizer_240323.model.v3"),
    "v7": ("tokenizer.model.v7", "mistral_instruct_tokenizer_241114.model.v7"),
}
SEEDS = range(4)
ALNUM = string.ascii_letters + string.digits


def _require_mistral_common() -> Path:
    for pkg in ("mistral_common", "sentencepiece"):
        if importlib.util.find_spec(pkg) is None:
            pytest.skip(f"{pkg} is not installed (pip install 'msgtrain[mistral]')")
    import mistral_common

    return Path(mistral_common.__file__).parent / "data"


def mistral_folder(kind: str, root: Path) -> Path:
    """A model-like folder holding mistral-common's shipped tokenizer file of ``kind`` under its repository name."""
    data = _require_mistral_common()
    name, shipped = FILES[kind]
    if not (data / shipped).is_file():
        pytest.skip(f"mistral-common does not ship {shipped} in this version")
    folder = root / f"mistral-{kind}"
    folder.mkdir(exist_ok=True)
    (folder / name).write_bytes((data / shipped).read_bytes())
    return folder


class MistralRun(RunGenerator):
    """The oracle's agent runs in the shape Mistral's format takes: call ids of 9 letters and digits, an assistant
    message with tool calls carries no text before v7, no separate reasoning (these versions have no think
    chunks), control text of Mistral's own in user and tool content."""

    def __init__(self, seed: int, *, text_with_calls: bool):
        super().__init__(seed, "demo", with_tools=True, hard=0.5)
        self.inline = self.keys = False  # an inline <think> is plain text here; schema keys: not Mistral's concern
        self.inject = seed % 2 == 1  # control text in user and tool content on every other seed
        self.text_with_calls = text_with_calls

    def _call_id(self) -> str:
        return "".join(self.rng.choice(ALNUM) for _ in range(9))

    def _control(self) -> str:
        return self.rng.choice(["[INST]", "[/INST]", "</s>", "[TOOL_CALLS]", "[TOOL_RESULTS]", "<s>"])

    def assistant(self, *, allow_tools: bool) -> dict[str, Any]:
        msg = super().assistant(allow_tools=allow_tools)
        msg.pop("reasoning_content", None)
        if msg.get("tool_calls") and not self.text_with_calls:
            msg["content"] = None
        return msg


class MistralOracle:
    """mistral-common called directly on OpenAI-shaped messages."""

    def __init__(self, path: Path):
        from mistral_common.protocol.instruct.validator import ValidationMode
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

        self.serving = MistralTokenizer.from_file(str(path), mode=ValidationMode.test)
        self.training = MistralTokenizer.from_file(str(path), mode=ValidationMode.finetuning)

    def ids(self, messages: list[dict[str, Any]], tools: list[Any] | None, *, final: bool) -> list[int]:
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        wire = [_wire(m) for m in messages]
        request = ChatCompletionRequest.from_openai(wire, tools=tools)
        return list((self.training if final else self.serving).encode_chat_completion(request).tokens)

    def turn(self, c: Call, msg: dict[str, Any]) -> ExpectedTurn:
        prompt = self.ids(c.context, c.tools, final=False)
        full = self.ids([*c.context, msg], c.tools, final=True)
        assert full[: len(prompt)] == prompt, "mistral-common appends a message after its context's ids"
        return ExpectedTurn(prompt, full[len(prompt) :], None)


def _wire(m: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in m.items() if k in ("role", "content", "tool_call_id", "name")}
    if m.get("tool_calls"):
        out["tool_calls"] = [{"id": tc["id"], "type": "function", "function": tc["function"]} for tc in m["tool_calls"]]
    if m["role"] == "tool":
        out.pop("name", None)
    return out


def records_and_expected(
    oracle: MistralOracle, calls: list[Call], rng: random.Random, engine_share: float
) -> tuple[list[dict[str, Any]], list[ExpectedTurn]]:
    """Per-call records (a share with vLLM-style engine ids, which are the oracle's ids) and the expected turns."""
    records, expected, seen = [], [], set()
    for k, c in enumerate(calls):
        engine = rng.random() < engine_share
        turns = [oracle.turn(c, msg) for msg in c.choices]
        choices = []
        for j, (msg, exp) in enumerate(zip(c.choices, turns, strict=True)):
            choice: dict[str, Any] = {"index": j, "message": _wire(msg), "finish_reason": "stop"}
            if engine:
                choice["token_ids"] = exp.completion
            choices.append(choice)
            key = json.dumps([c.context, c.tools, msg], sort_keys=True)
            if key not in seen:
                seen.add(key)
                expected.append(exp)
        resp: dict[str, Any] = {"id": f"r{k}", "model": "m", "created": c.created, "choices": choices}
        if engine:
            resp["prompt_token_ids"] = turns[0].prompt
        req: dict[str, Any] = {"model": "m", "messages": [_wire(m) for m in c.context]}
        if c.tools:
            req["tools"] = c.tools
        records.append({"request": req, "response": resp, "session_id": "run"})
    return records, expected


@pytest.mark.parametrize("kind", list(FILES))
@pytest.mark.parametrize("seed", SEEDS)
def test_every_trained_turn_equals_what_mistral_common_encodes(kind: str, seed: int, tmp_path: Path) -> None:
    folder = mistral_folder(kind, tmp_path)
    tok = load_tokenizer(str(folder))
    assert tok.encodes_messages, "a folder with a Mistral tokenizer file is encoded through mistral-common"
    oracle = MistralOracle(next(p for p in folder.iterdir()))
    calls = MistralRun(seed, text_with_calls=kind == "v7").run(n_turns=7)
    engine_share = 0.0 if seed % 2 == 0 else 0.5
    records, expected = records_and_expected(oracle, calls, random.Random(seed), engine_share)
    samples = []
    for g in _graphs_from_records(records, tmp_path):
        result = linearize_graph(g, tok)
        dropped = [(o.reason, o.message) for o in result.turns if o.status == "dropped"]
        assert not dropped, dropped
        samples.extend(result.samples)
    rows = samples_to_table(samples).to_pylist()
    for row in rows:
        check_sample(row)
    check_rows(rows, expected, engine_logprobs=False)


def test_a_completion_is_the_assistant_message_and_its_end_token(tmp_path: Path) -> None:
    tok = load_tokenizer(str(mistral_folder("v7", tmp_path)))
    call = {"id": "a1b2c3d4e", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}
    context = [{"role": "user", "content": "find x"}]
    prompt = tok.encode_messages(context, [], final=False)
    full = tok.encode_messages([*context, {"role": "assistant", "content": None, "tool_calls": [call]}], [], final=True)
    completion = tok.decode(full[len(prompt) :].tolist())
    assert tok.decode(prompt.tolist()).endswith("[/INST]")
    assert completion.startswith("[TOOL_CALLS]") and completion.endswith("</s>"), completion
    assert '"a1b2c3d4e"' in completion and "▁" not in completion


def test_hf_prefix_and_mistral_prefix_choose_the_mode(tmp_path: Path) -> None:
    folder = mistral_folder("tekken", tmp_path)
    assert load_tokenizer(f"mistral:{folder / 'tekken.json'}").encodes_messages
    assert load_tokenizer(f"mistral:{folder}").encodes_messages
    with pytest.raises(ConfigError, match="not a Mistral tokenizer file"):
        load_tokenizer(f"mistral:{tmp_path / 'nothing'}")


def test_a_chat_template_with_a_mistral_tokenizer_is_a_usage_error(tmp_path: Path) -> None:
    folder = mistral_folder("tekken", tmp_path)
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}")
    with pytest.raises(ConfigError, match="does not apply to the Mistral tokenizer"):
        load_tokenizer(str(folder), str(template))


def test_a_model_folder_with_a_mistral_tokenizer_file_and_a_template_loads_through_mistral_common(
    tmp_path: Path,
) -> None:
    folder = mistral_folder("v7", tmp_path)
    (folder / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    tok = load_tokenizer(str(folder))
    assert (
        tok.encodes_messages
        and tok.decode(tok.encode_messages([{"role": "user", "content": "hi"}], [], final=False).tolist())
        == "<s>[INST]hi[/INST]"
    )


def test_a_mistral_folder_without_mistral_common_names_the_package_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "nemo"
    folder.mkdir()
    (folder / "tekken.json").write_bytes(b"{}")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mistral_common" else real(name))
    with pytest.raises(ConfigError, match=r"mistral-common, and mistral_common is not installed") as err:
        load_tokenizer(str(folder))
    assert "msgtrain[mistral]" in (err.value.hint or "")


def test_tool_call_ids_longer_than_nine_characters_are_cut_to_their_last_nine_as_vllm_serves_them(
    tmp_path: Path,
) -> None:
    folder = mistral_folder("tekken", tmp_path)
    tok = load_tokenizer(str(folder))
    oracle = MistralOracle(folder / "tekken.json")
    long_id, served = "call_9f8e7d6c5b4a", "e7d6c5b4a"
    call = {"id": long_id, "type": "function", "function": {"name": "search", "arguments": '{"query": "x"}'}}
    context = [
        {"role": "user", "content": "find x"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": long_id, "content": "found"},
    ]
    reply = {"role": "assistant", "content": "x is found"}
    records = [
        {
            "request": {"model": "m", "messages": context, "tools": TOOLS},
            "response": {"id": "r", "model": "m", "choices": [{"index": 0, "message": reply, "finish_reason": "stop"}]},
        }
    ]
    (g,) = _graphs_from_records(records, tmp_path)
    result = linearize_graph(g, tok)
    served_context = [*context[:1], {**context[1], "tool_calls": [{**call, "id": served}]}]
    served_context.append({**context[2], "tool_call_id": served})
    expected = oracle.turn(Call(served_context, TOOLS, [reply]), reply)
    (row,) = samples_to_table(result.samples).to_pylist()
    (span,) = row["turn_spans"]
    assert row["input_ids"][: span["start"]] == expected.prompt
    assert row["input_ids"][span["start"] : span["end"]] == expected.completion
