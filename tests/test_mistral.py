"""Mistral tokenizers through mistral-common: every trained turn equals ``encode_chat_completion``.

The oracle is mistral-common itself, called directly: a turn's prompt is the encoding of its context (serving
validation), its completion the encoding of context + message (fine-tuning validation) past the prompt. The
tokenizer folders are built at test time from the files mistral-common ships (:mod:`tests.mistral_files`):
SentencePiece v1, v2, v3, v7 and tekken v3 (Mistral NeMo's file), v7, v11 and v13 (its vocabulary declaring the
newer control tokens). Seeded random agent runs in the shape each version takes (tool calls with 9-character ids
from v2, parallel calls, text next to calls from v7, reasoning from v13, null content, consecutive user messages,
system prompts, tool results, edits, compactions, n>1 samples, control-token text in user and tool content) are
logged as per-call records and converted by msgtrain.
"""

from __future__ import annotations

import importlib.util
import json
import random
import string
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from msgtrain.errors import ConfigError
from msgtrain.export.schema import check_sample, samples_to_table
from msgtrain.linearize import LinearizeOptions, linearize_graph
from msgtrain.linearize.loading import load_tokenizer
from tests.mistral_files import KINDS, mistral_folder
from tests.oracle import TOOLS, Call, ExpectedTurn, RunGenerator
from tests.test_linearize_oracle import _graphs_from_records, check_rows

SEEDS = range(3)
# The tests of one kind run one after another (tests/conftest.py): a tekken file takes about half a second to load and
# only the few tokenizers used last stay loaded, so interleaved by seed every kind would be loaded again for each.
TOKENIZER_PARAM = "kind"
ALNUM = string.ascii_letters + string.digits
# What each version's format holds (mistral-common refuses the rest): tools from v2, text next to tool calls from v7,
# reasoning ([THINK]) in the v13 file that declares its tokens; parallel calls from v3.
NO_TOOLS = {"spm-v1"}
ONE_CALL = {"spm-v2"}  # v2 encodes one tool call per assistant message
TEXT_WITH_CALLS = {"spm-v7", "tekken-v7", "tekken-v11", "tekken-v13"}
THINKS = {"tekken-v13"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One folder per kind for the module (a tekken file takes seconds to load: loaded once per process)."""
    root = tmp_path_factory.mktemp("mistral")
    return {kind: mistral_folder(kind, root) for kind in KINDS}


class MistralRun(RunGenerator):
    """The oracle's agent runs in the shape a Mistral version takes: call ids of 9 letters and digits, text next
    to tool calls and reasoning only where the version encodes them, control text of Mistral's own in user and
    tool content, and now and then two user messages in a row."""

    def __init__(self, seed: int, kind: str):
        super().__init__(seed, "demo", with_tools=kind not in NO_TOOLS, hard=0.5)
        self.inline = self.keys = False  # an inline <think> is plain text here; schema keys: not Mistral's concern
        self.inject = seed % 2 == 1  # control text in user and tool content on every other seed
        self.kind = kind

    def _call_id(self) -> str:
        return "".join(self.rng.choice(ALNUM) for _ in range(9))

    def _control(self) -> str:
        return self.rng.choice(["[INST]", "[/INST]", "</s>", "[TOOL_CALLS]", "[TOOL_RESULTS]", "<s>", "[THINK]"])

    def _content(self, lo: int = 2, hi: int = 12) -> str:
        text = super()._content(lo, hi)
        return text if self.rng.random() > 0.15 else text + "\n\n" + super()._content(1, 4)

    def assistant(self, *, allow_tools: bool) -> dict[str, Any]:
        msg = super().assistant(allow_tools=allow_tools)
        if self.kind not in THINKS:
            msg.pop("reasoning_content", None)
        if self.kind in ONE_CALL and msg.get("tool_calls"):
            msg["tool_calls"] = msg["tool_calls"][:1]
        if msg.get("tool_calls") and (self.kind not in TEXT_WITH_CALLS or self.rng.random() < 0.3):
            msg["content"] = None
        return msg

    def run(self, n_turns: int) -> list[Call]:
        calls = super().run(n_turns)
        for c in calls:  # a user message sent in two parts: mistral-common joins them
            if c.context[-1]["role"] == "user" and self.rng.random() < 0.3:
                c.context.append({"role": "user", "content": "and also " + self._content(1, 4)})
        return calls


@cache
def oracle_for(path: Path) -> MistralOracle:
    return MistralOracle(path)


class MistralOracle:
    """mistral-common called directly on OpenAI-shaped messages."""

    def __init__(self, path: Path):
        from mistral_common.protocol.instruct.validator import ValidationMode, get_validator
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

        self.serving = MistralTokenizer.from_file(str(path), mode=ValidationMode.test)
        # The same file in fine-tuning mode: the mode is the validator's alone, so the twin is built as from_file
        # builds it around the instruct tokenizer already loaded (a tekken file is read once, not twice).
        self.training = MistralTokenizer(
            self.serving.instruct_tokenizer,
            validator=get_validator(self.serving.instruct_tokenizer.tokenizer.version, mode=ValidationMode.finetuning),
            request_normalizer=self.serving._instruct_request_normalizer,
        )
        assert self.training.mode == ValidationMode.finetuning

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
    out = {k: v for k, v in m.items() if k in ("role", "content", "tool_call_id", "name", "reasoning_content")}
    if m.get("tool_calls"):
        out["tool_calls"] = [{"id": tc["id"], "type": "function", "function": tc["function"]} for tc in m["tool_calls"]]
    return out  # a tool message keeps its tool's name: v2 encodes it (msgtrain fills it in from the call)


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


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("seed", SEEDS)
def test_every_trained_turn_equals_what_mistral_common_encodes(
    kind: str, seed: int, folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = folders[kind]
    tok = load_tokenizer(str(folder))
    assert tok.encodes_messages, "a folder with a Mistral tokenizer file is encoded through mistral-common"
    oracle = oracle_for(next(p for p in folder.iterdir()))
    calls = MistralRun(seed, kind).run(n_turns=7)
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
        assert not row["flags"], row["flags"]  # nothing the version holds was left out
    check_rows(rows, expected, engine_logprobs=False)


def test_a_completion_is_the_assistant_message_and_its_end_token(tmp_path: Path) -> None:
    tok = load_tokenizer(str(mistral_folder("spm-v7", tmp_path)))
    call = {"id": "a1b2c3d4e", "type": "function", "function": {"name": "search", "arguments": '{"q": "x"}'}}
    context = [{"role": "user", "content": "find x"}]
    prompt = tok.encode_messages(context, [], final=False)
    full = tok.encode_messages([*context, {"role": "assistant", "content": None, "tool_calls": [call]}], [], final=True)
    completion = tok.decode(full[len(prompt) :].tolist())
    assert tok.decode(prompt.tolist()).endswith("[/INST]")
    assert completion.startswith("[TOOL_CALLS]") and completion.endswith("</s>"), completion
    assert '"a1b2c3d4e"' in completion and "▁" not in completion


def test_hf_prefix_and_mistral_prefix_choose_the_mode(tmp_path: Path) -> None:
    folder = mistral_folder("spm-v3", tmp_path)
    assert load_tokenizer(f"mistral:{folder / 'tokenizer.model.v3'}").encodes_messages
    assert load_tokenizer(f"mistral:{folder}").encodes_messages
    with pytest.raises(ConfigError, match="not a Mistral tokenizer file"):
        load_tokenizer(f"mistral:{tmp_path / 'nothing'}")


def test_a_chat_template_with_a_mistral_tokenizer_is_a_usage_error(tmp_path: Path) -> None:
    folder = mistral_folder("tekken-v3", tmp_path)
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}")
    with pytest.raises(ConfigError, match="does not apply to the Mistral tokenizer"):
        load_tokenizer(str(folder), str(template))


def test_a_model_folder_with_a_mistral_tokenizer_file_and_a_template_loads_through_mistral_common(
    tmp_path: Path,
) -> None:
    folder = mistral_folder("spm-v7", tmp_path)
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


def _record(context: list[dict[str, Any]], reply: dict[str, Any], tools: Any = TOOLS) -> dict[str, Any]:
    """One logged call: its request (``context``, ``tools``) and its response (``reply``)."""
    request = {"model": "m", "messages": context, **({"tools": tools} if tools else {})}
    choice = {"index": 0, "message": reply, "finish_reason": "stop"}
    return {"request": request, "response": {"id": "r", "model": "m", "choices": [choice]}}


def test_tool_call_ids_longer_than_nine_characters_are_cut_to_their_last_nine_as_vllm_serves_them(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = folders["tekken-v3"]
    tok = load_tokenizer(str(folder))
    oracle = oracle_for(folder / "tekken.json")
    long_id, served = "call_9f8e7d6c5b4a", "e7d6c5b4a"
    call = {"id": long_id, "type": "function", "function": {"name": "search", "arguments": '{"query": "x"}'}}
    context = [
        {"role": "user", "content": "find x"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": long_id, "content": "found"},
    ]
    reply = {"role": "assistant", "content": "x is found"}
    records = [_record(context, reply)]
    (g,) = _graphs_from_records(records, tmp_path)
    result = linearize_graph(g, tok)
    served_context = [*context[:1], {**context[1], "tool_calls": [{**call, "id": served}]}]
    served_context.append({**context[2], "tool_call_id": served})
    expected = oracle.turn(Call(served_context, TOOLS, [reply]), reply)
    (row,) = samples_to_table(result.samples).to_pylist()
    (span,) = row["turn_spans"]
    assert row["input_ids"][: span["start"]] == expected.prompt
    assert row["input_ids"][span["start"] : span["end"]] == expected.completion


def _one_turn(
    tok: Any, context: list[dict[str, Any]], reply: dict[str, Any], tmp_path: Path, **options: Any
) -> tuple[dict[str, Any], list[int], list[int]]:
    """(the row, its prompt ids, its completion ids) of one logged call answered by ``reply``."""
    records = [_record(context, reply)]
    (g,) = _graphs_from_records(records, tmp_path)
    result = linearize_graph(g, tok, options=LinearizeOptions(**options))
    assert set(result.drops) <= {"context_unknown"}, result.turns  # the logged history's own replies: not sampled
    (row,) = samples_to_table(result.samples).to_pylist()
    (span,) = row["turn_spans"]
    return row, row["input_ids"][: span["start"]], row["input_ids"][span["start"] : span["end"]]


def _call(call_id: str, name: str = "search") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": '{"query": "x"}'}}


def test_call_ids_vllm_would_refuse_get_nine_letters_and_digits_the_same_for_a_call_and_its_result(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = folders["tekken-v3"]
    tok = load_tokenizer(str(folder))
    logged = ["call_1", "command-1", "c1"]  # what Gemini CLI, ShareGPT and hand-written logs carry
    context = [
        {"role": "user", "content": "find x"},
        {"role": "assistant", "content": None, "tool_calls": [_call(i) for i in logged]},
        *({"role": "tool", "tool_call_id": i, "content": f"found {i}"} for i in logged),
    ]
    reply = {"role": "assistant", "content": "x is found"}
    row, prompt, completion = _one_turn(tok, context, reply, tmp_path)
    text = tok.decode(prompt)
    calls = json.loads(text.split("[TOOL_CALLS]")[1].split("</s>")[0])
    results = [json.loads(r) for r in text.split("[TOOL_RESULTS]")[1:] for r in [r.split("[/TOOL_RESULTS]")[0]]]
    served = [c["id"] for c in calls]
    assert [r["call_id"] for r in results] == served, "a call and its result are shown the same id"
    assert len(set(served)) == 3 and all(len(i) == 9 and i.isalnum() and i.isascii() for i in served), served
    (tmp_path / "again").mkdir()
    again, _, _ = _one_turn(tok, context, reply, tmp_path / "again")
    assert again["input_ids"] == row["input_ids"], "the same log is served the same ids in every run"
    renamed = dict(zip(logged, served, strict=True))
    served_context = [
        context[0],
        {**context[1], "tool_calls": [_call(renamed[i]) for i in logged]},
        *({**m, "tool_call_id": renamed[m["tool_call_id"]]} for m in context[2:]),
    ]
    expected = oracle_for(folder / "tekken.json").turn(Call(served_context, TOOLS, [reply]), reply)
    assert (prompt, completion) == (expected.prompt, expected.completion)


@pytest.mark.parametrize(("kind", "kept"), [("tekken-v7", False), ("tekken-v13", True)])
def test_reasoning_is_encoded_where_the_version_has_think_tokens_and_else_left_out_with_a_flag(
    kind: str, kept: bool, folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = folders[kind]
    tok = load_tokenizer(str(folder))
    context = [{"role": "user", "content": "is x there?"}]
    reply = {"role": "assistant", "content": "yes", "reasoning_content": "the user asks about x"}
    row, prompt, completion = _one_turn(tok, context, reply, tmp_path)
    encoded = reply if kept else {"role": "assistant", "content": "yes"}
    expected = oracle_for(next(folder.iterdir())).turn(Call(context, TOOLS, [encoded]), encoded)
    assert (prompt, completion) == (expected.prompt, expected.completion)
    assert ("[THINK]the user asks about x[/THINK]" in tok.decode(completion)) == kept
    assert row["flags"] == ([] if kept else ["template_dropped_reasoning"])


@pytest.mark.parametrize(("kind", "kept"), [("spm-v3", False), ("spm-v7", True)])
def test_text_next_to_tool_calls_is_encoded_from_v7_and_before_it_left_out_with_a_flag(
    kind: str, kept: bool, folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = folders[kind]
    tok = load_tokenizer(str(folder))
    context = [
        {"role": "user", "content": "find x"},
        {"role": "assistant", "content": "Searching.", "tool_calls": [_call("a1b2c3d4e")]},
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "content": "nothing"},
    ]
    reply = {"role": "assistant", "content": "Once more.", "tool_calls": [_call("f5g6h7i8j")]}
    if not kept:
        # By default a turn whose encoding lost its text is not trained (its tokens are not what was sampled).
        (g,) = _graphs_from_records([_record(context, reply)], tmp_path)
        assert linearize_graph(g, tok).drops["template_dropped_content"] == 1
    row, prompt, completion = _one_turn(tok, context, reply, tmp_path, train_dropped=True)
    if kept:
        encoded_context, encoded = context, reply
    else:
        encoded_context = [context[0], {**context[1], "content": None}, context[2]]
        encoded = {**reply, "content": None}
    expected = oracle_for(next(folder.iterdir())).turn(Call(encoded_context, TOOLS, [encoded]), encoded)
    assert (prompt, completion) == (expected.prompt, expected.completion)
    assert row["flags"] == ([] if kept else ["template_dropped_content"])


def test_a_mistral_run_that_trains_nothing_exits_3_and_says_why(
    folders: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from msgtrain.cli import main

    log = tmp_path / "calls.jsonl"
    context = [{"role": "user", "content": "find x"}]
    reply = {"role": "assistant", "content": None, "tool_calls": [_call("a1b2c3d4e")]}
    log.write_text(json.dumps(_record(context, reply)) + "\n", encoding="utf-8")
    code = main(["convert", str(log), "-o", str(tmp_path / "out"), "--tokenizer", str(folders["spm-v1"])])
    assert code == 3  # v1 has no tool format: mistral-common refuses the turn
    assert "no sampled turn was trained: 1 dropped (render_error=1)" in capsys.readouterr().err


def test_a_context_call_no_result_answers_is_left_out_while_the_sampled_message_keeps_every_call(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = folders["tekken-v11"]  # v11 pairs calls and results by id
    tok = load_tokenizer(str(folder))
    context = [
        {"role": "user", "content": "find x"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a1b2c3d4e"), _call("webSearch", "read_file")]},
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "content": "found"},  # the built-in search logged no result
    ]
    reply = {"role": "assistant", "content": None, "tool_calls": [_call("f5g6h7i8j"), _call("k1l2m3n4o")]}
    _, prompt, completion = _one_turn(tok, context, reply, tmp_path)
    answered = [context[0], {**context[1], "tool_calls": [_call("a1b2c3d4e")]}, context[2]]
    expected = oracle_for(folder / "tekken.json").turn(Call(answered, TOOLS, [reply]), reply)
    assert (prompt, completion) == (expected.prompt, expected.completion)
    assert tok.decode(completion).count("[TOOL_CALLS]") == 2


@pytest.mark.parametrize("kind", ["spm-v3", "spm-v7"])
def test_a_system_message_after_an_assistant_message_is_encoded_where_the_version_puts_system_messages(
    kind: str, folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = folders[kind]
    tok = load_tokenizer(str(folder))
    oracle = oracle_for(next(folder.iterdir()))
    notice = {"role": "system", "content": "Approval granted."}  # Codex's developer notice between call and result
    context = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "find x"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a1b2c3d4e")]},
        notice,
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "content": "found"},
    ]
    reply = {"role": "assistant", "content": "x is found"}
    _, prompt, completion = _one_turn(tok, context, reply, tmp_path)
    if kind == "spm-v3":  # before v7 every system message joins the one system prompt: where it stood is lost
        moved = [context[0], notice, *context[1:3], context[4]]
        expected = oracle.turn(Call(moved, TOOLS, [reply]), reply)
        assert (prompt, completion) == (expected.prompt, expected.completion)
        assert "You are an agent.\n\nApproval granted.\n\nfind x[/INST]" in tok.decode(prompt)
    else:  # from v7 a system message is encoded in place: mistral-common's ids with [SYSTEM_PROMPT]…[/SYSTEM_PROMPT]
        without = oracle.turn(Call([*context[:3], context[4]], TOOLS, [reply]), reply)
        text = tok.decode(prompt)
        assert "</s>[SYSTEM_PROMPT]Approval granted.[/SYSTEM_PROMPT][TOOL_RESULTS]" in text, text
        begin = tok.raw.get_special_token("[SYSTEM_PROMPT]")
        start = max(i for i, t in enumerate(prompt) if t == begin)  # the notice's, after the call
        end = prompt.index(tok.raw.get_special_token("[/SYSTEM_PROMPT]"), start) + 1
        assert (prompt[:start] + prompt[end:], completion) == (without.prompt, without.completion)


def test_a_tool_schema_that_is_not_json_schema_and_an_odd_name_are_shown_as_logged_and_a_responses_tool_as_chat(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    tok = load_tokenizer(str(folders["spm-v7"]))
    odd = {
        "name": "db.lookup",
        "description": "d",
        "parameters": {"type": "object", "properties": {"k": {"type": "dict"}}},
    }
    flat = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    ids = tok.encode_messages(
        [{"role": "user", "content": "hi"}], [{"type": "function", "function": odd}, flat], final=False
    )
    shown = json.loads(tok.decode(ids.tolist()).split("[AVAILABLE_TOOLS]")[1].split("[/AVAILABLE_TOOLS]")[0])
    assert [t["function"]["name"] for t in shown] == ["db.lookup", "get_weather"]
    assert shown[0]["function"]["parameters"]["properties"]["k"] == {"type": "dict"}


@pytest.mark.parametrize(
    ("kind", "url"),
    [
        ("tekken-v3", "https://example.com/chart.png"),  # Pixtral's file reads images, but only from their bytes
        ("spm-v7", "data:image/png;base64,iVBORw0KGgo="),  # a text-only model
    ],
)
def test_media_the_tokenizer_cannot_encode_or_that_is_given_by_url_is_left_out_flagged_and_never_fetched(
    kind: str, url: str, folders: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("msgtrain opened a connection")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    folder = folders[kind]
    tok = load_tokenizer(str(folder))
    image = {"type": "image_url", "image_url": {"url": url}}
    context = [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, image]}]
    reply = {"role": "assistant", "content": "a chart"}
    row, prompt, completion = _one_turn(tok, context, reply, tmp_path)
    text_only = [{"role": "user", "content": [{"type": "text", "text": "what is this?"}]}]
    expected = oracle_for(next(folder.iterdir())).turn(Call(text_only, TOOLS, [reply]), reply)
    assert (prompt, completion) == (expected.prompt, expected.completion)
    assert row["flags"] == ["media_not_rendered"]


def test_before_v7_consecutive_assistant_messages_that_call_tools_lose_their_text_as_one_message(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    folder = folders["tekken-v3"]
    tok = load_tokenizer(str(folder))
    context = [
        {"role": "user", "content": "find x"},
        {"role": "assistant", "content": "Let me look."},
        {"role": "assistant", "content": None, "tool_calls": [_call("a1b2c3d4e")]},
        {"role": "tool", "tool_call_id": "a1b2c3d4e", "content": "found"},
    ]
    reply = {"role": "assistant", "content": "x is found"}
    _, prompt, completion = _one_turn(tok, context, reply, tmp_path)
    expected = oracle_for(folder / "tekken.json").turn(Call([context[0], *context[2:]], TOOLS, [reply]), reply)
    assert (prompt, completion) == (expected.prompt, expected.completion)


@pytest.mark.parametrize("kind", list(KINDS))
def test_audit_template_on_a_folder_with_only_a_mistral_tokenizer_reports_its_trained_end_token(
    kind: str, folders: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from msgtrain.cli import main

    code = main(["audit-template", "--tokenizer", str(folders[kind]), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code in (0, 3), report  # 3: a property fails (the tool list moves before v13), never an internal error
    assert report["end_of_turn"]["ok"] and report["end_of_turn"]["tokens"] == ["</s>"], report["end_of_turn"]
    assert report["special_tokens"]["split_safe"]
    probes = {p["feature"]: p for p in report["probes"]}
    assert probes["multi_turn"]["status"] == "stable" and probes["date"]["status"] == "stable"
    assert (probes["tool_calls"]["status"] == "unsupported") == (kind in NO_TOOLS)
    assert (probes["reasoning"]["status"] == "dropped") == (kind not in THINKS)
    # The tool list (and before v7 the system prompt) is written before the last user message until v13: the
    # audit says the later turn re-encodes it, as the linearizer cuts there.
    moves = kind not in NO_TOOLS and kind not in THINKS
    assert (probes["tool_calls"]["status"] == "breaks") == moves
    assert code == (3 if moves else 0)


def test_inspect_shows_a_dataset_written_with_a_mistral_tokenizer(
    folders: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from msgtrain.cli import main

    log = tmp_path / "calls.jsonl"
    context = [{"role": "user", "content": "say [INST] twice"}]
    reply = {"role": "assistant", "content": "[INST] [INST]"}
    log.write_text(json.dumps(_record(context, reply, tools=None)) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["convert", str(log), "-o", str(out), "--tokenizer", str(folders["tekken-v7"])]) == 0
    capsys.readouterr()
    assert main(["inspect", str(out), "--sample", "0"]) == 0
    shown = capsys.readouterr().out
    assert "[INST]say [INST] twice[/INST][INST] [INST]</s>" in shown.replace("\n", ""), shown
