"""``--target rl`` rows as OpenPipe ART's own data (``msgtrain.trainers.art``): one ``Trajectory`` per trajectory
with its reward, one ``TrajectoryGroup`` per ``--group-by`` group, each trained turn a ``Choice`` whose logprobs carry
the row's ids, so that ART's tokenizer trains exactly the row's tokens.

ART (``openpipe-art``) installs on CPU from PyPI, but brings litellm, weave, polars and openai >= 2.14 and is not a
dependency of msgtrain; its trainer's tokenizer needs its ``backend`` extra (torch 2.10, transformers 5.2, unsloth).
So these tests check the layout against ART's schema and replay ART's tokenization step as its code does it, read
from ``openpipe-art`` 0.5.18 (PyPI wheel ``openpipe_art-0.5.18-py3-none-any.whl``): ``art/trajectories.py``
(``Trajectory``, ``History``, ``TrajectoryGroup`` fields), ``art/types.py`` (``MessagesAndChoices``: OpenAI message
params or ``openai.types.chat.chat_completion.Choice``), ``art/preprocessing/tokenize.py`` (``tokenize_trajectory``:
sentinel, ``token_id:<id>`` parsing, the end token dropped, the ``<think>`` shift). ART's own objects are built where
``art`` is importable.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from msgtrain.errors import ConfigError
from msgtrain.trainers.art import (
    GROUP_FIELDS,
    HISTORY_FIELDS,
    TRAJECTORY_FIELDS,
    art_trajectory_groups,
    read_graphs,
    to_art,
)
from tests.conftest import load_named_tokenizer, shared_path
from tests.test_rl_groups import EIGHT, convert, write_rollouts

TOKEN = re.compile(r"^token_id:(\d+)$")
CHOICE_FIELDS = {"finish_reason", "index", "message", "logprobs"}
TOKEN_LOGPROB_FIELDS = {"token", "logprob", "bytes", "top_logprobs"}
METADATA_VALUE = (str, int, float, bool, type(None))  # art.trajectories.MetadataValue


def is_choice(item: dict[str, Any]) -> bool:
    return "message" in item and "role" not in item


def check_art_layout(groups: list[dict[str, Any]]) -> None:
    """The field names and value types ART's pydantic models accept (art/trajectories.py, art/types.py)."""
    for group in groups:
        assert set(group) == set(GROUP_FIELDS)
        assert isinstance(group["trajectories"], list) and group["trajectories"]
        assert all(isinstance(v, METADATA_VALUE) for v in group["metadata"].values())
        for t in group["trajectories"]:
            assert set(t) == set(TRAJECTORY_FIELDS)
            assert isinstance(t["reward"], float)
            assert all(isinstance(v, METADATA_VALUE) for v in t["metadata"].values())
            assert all(isinstance(v, int | float | bool) for v in t["metrics"].values())
            for history in [t, *t["additional_histories"]]:
                assert set(HISTORY_FIELDS) <= set(history)
                assert history["tools"] is None or all(isinstance(x, dict) for x in history["tools"])
                for item in history["messages_and_choices"]:
                    if is_choice(item):
                        assert set(item) == CHOICE_FIELDS and item["finish_reason"] in ("stop", "tool_calls")
                        assert item["message"]["role"] == "assistant"
                        assert "tool_calls" not in item["message"]  # held by the ids (see art_tokenize)
                        for lp in item["logprobs"]["content"]:
                            assert set(lp) == TOKEN_LOGPROB_FIELDS and TOKEN.match(lp["token"])
                            assert isinstance(lp["logprob"], float) and lp["top_logprobs"] == []
                    else:
                        assert item["role"] in ("system", "developer", "user", "assistant", "tool")


def art_tokenize(hf: Any, history: dict[str, Any]) -> tuple[list[int], list[int], list[float]]:
    """ART's ``tokenize_trajectory`` for a history whose trainable replies are choices with logprobs
    (``allow_training_without_logprobs=False``), as openpipe-art 0.5.18 does it: render the messages with every
    choice's content replaced by a sentinel id the rendering does not use, replace each sentinel with the choice's
    ``token_id:`` ids (four tokens earlier when the ids open with ``<think>`` where the template printed one), and drop
    the template's token after the sentinel when the ids already end with it. Returns ids, assistant mask, logprobs."""
    items = history["messages_and_choices"]
    last = max(i for i, item in enumerate(items) if is_choice(item))
    items = items[: last + 1]
    kwargs = {"enable_thinking": False} if "enable_thinking" in (hf.chat_template or "") else {}
    messages = [  # art.trajectories.get_messages; the last choice's tool calls left out (_messages_for_chat_template)
        {
            "role": "assistant",
            "content": item["message"]["content"] or "",
            **({"tool_calls": item["message"]["tool_calls"]} if item["message"].get("tool_calls") and i < last else {}),
        }
        if is_choice(item)
        else {**item, "content": item.get("content") or ""}
        for i, item in enumerate(items)
    ]
    tools = history["tools"]
    original = hf.apply_chat_template(messages, tools=tools, tokenize=True, continue_final_message=False, **kwargs)
    original = original["input_ids"] if isinstance(original, dict) or hasattr(original, "keys") else original
    sentinel = max(set(range(hf.vocab_size)) - set(original))
    templated = [
        {
            "role": "assistant",
            "content": hf.decode(sentinel),
            **({"tool_calls": m["tool_calls"]} if "tool_calls" in m else {}),
        }
        if is_choice(item)
        else m
        for item, m in zip(items, messages, strict=True)
    ]
    ids = hf.apply_chat_template(templated, tools=tools, tokenize=True, continue_final_message=True, **kwargs)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    mask, logprobs = [0] * len(ids), [math.nan] * len(ids)
    for item in items:
        if not is_choice(item):
            continue
        content = item["logprobs"]["content"]
        start = ids.index(sentinel)
        end_token = ids[start + 1] if start + 1 < len(ids) else None
        if content and bytes(content[0]["bytes"] or []).decode() == "<think>" == hf.decode(ids[start - 4]):
            start -= 4
        new = [int(TOKEN.match(lp["token"]).group(1)) for lp in content]  # type: ignore[union-attr]
        ids[start : start + 1] = new
        logprobs[start : start + 1] = [lp["logprob"] for lp in content]
        mask[start : start + 1] = [1] * len(new)
        if ids[start + len(new) - 1] == end_token:
            for column in (ids, logprobs, mask):
                column.pop(start + len(new))
    return ids, mask, logprobs


def check_against_rows(groups: list[dict[str, Any]], rows: list[dict[str, Any]], hf: Any) -> None:
    """ART's tokenization of each trajectory gives the row's ids, trains exactly its trained tokens, with its
    logprobs; each trajectory has the row's reward, each group the row's group."""
    by_sample = {r["trajectory_id"]: r for r in rows}
    for group in groups:
        for t in group["trajectories"]:
            row = by_sample[t["metadata"]["trajectory_id"]]
            assert t["reward"] == row["reward"] and group["metadata"]["group_id"] == row["group_id"]
            ids, mask, logprobs = art_tokenize(hf, t)
            assert ids == row["input_ids"] and mask == row["loss_mask"]
            assert [None if math.isnan(lp) else lp for lp in logprobs] == [
                lp if lp is None else pytest.approx(lp) for lp in row["logprobs"]
            ]


def rollouts_converted(tmp_path: Path, *args: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    inputs = write_rollouts(tmp_path / "logs", EIGHT)
    code, rows, _ = convert(tmp_path / "out", inputs, "--group-by", "example_id", "--group-size", "2", *args)
    assert code == 0 and len(rows) == 8
    return rows, read_graphs([tmp_path / "logs"])


def test_verifiers_rollouts_become_art_groups_of_their_task_with_the_rows_ids_per_choice(tmp_path: Path) -> None:
    rows, graphs = rollouts_converted(tmp_path)
    tok = load_named_tokenizer("demo")
    groups = art_trajectory_groups(rows, graphs, decode=tok.decode)
    check_art_layout(groups)
    assert sorted(len(g["trajectories"]) for g in groups) == [2, 2, 2, 2]
    by_trajectory = {r["trajectory_id"]: r for r in rows}
    for group in groups:  # one task per group, its rollouts' rewards
        assert len({t["metadata"]["example_id"] for t in group["trajectories"]}) == 1
        for t in group["trajectories"]:
            row = by_trajectory[t["metadata"]["trajectory_id"]]
            assert t["reward"] == row["reward"] and row["group_id"] == group["metadata"]["group_id"]
            kinds = [item.get("role") or "choice" for item in t["messages_and_choices"]]
            assert kinds == ["system", "user", "choice", "tool", "choice"]
            assert t["messages_and_choices"][1]["content"].startswith("What is ")
            choices = [item for item in t["messages_and_choices"] if is_choice(item)]
            assert [c["finish_reason"] for c in choices] == ["tool_calls", "stop"]
            for choice, span in zip(choices, row["turn_spans"], strict=True):
                content = choice["logprobs"]["content"]
                ids = [int(TOKEN.match(lp["token"]).group(1)) for lp in content]  # type: ignore[union-attr]
                assert ids == row["input_ids"][span["start"] : span["end"]]
                assert b"".join(bytes(lp["bytes"]) for lp in content).decode() == tok.decode(ids)
                assert all(math.isnan(lp["logprob"]) for lp in content)  # the log has none: ART's loss takes its own


def test_arts_tokenization_of_the_groups_gives_the_rows_tokens(tmp_path: Path) -> None:
    """ART's sentinel needs a vocabulary whose every id decodes to a token that re-encodes to it (a real model's; the
    embedded byte-level demo's top ids are partial bytes), so this runs with Qwen's."""
    tok = load_named_tokenizer("qwen2.5")
    template = shared_path("tokenizers", "qwen2.5-instruct", "tokenizer_config.json")
    vocabulary = shared_path("tokenizers", "qwen3")
    rows, graphs = rollouts_converted(tmp_path, "--tokenizer", str(vocabulary), "--chat-template", str(template))
    groups = art_trajectory_groups(rows, graphs, decode=tok.decode)
    check_art_layout(groups)
    check_against_rows(groups, rows, tok.hf)


def test_a_trajectory_cut_into_rows_is_one_trajectory_with_additional_histories(tmp_path: Path) -> None:
    inputs = write_rollouts(tmp_path / "logs", EIGHT[:1])
    _, rows, _ = convert(tmp_path / "out", inputs, "--group-by", "example_id")
    row = rows[0]
    (first, second) = row["turn_spans"]
    # The row as a template that re-renders history would cut it: the first turn alone, then both turns' context
    # with the second one trained; one trajectory, so ART weighs it once over both histories.
    head = {
        **row,
        "input_ids": row["input_ids"][: first["end"]],
        "loss_mask": row["loss_mask"][: first["end"]],
        "logprobs": row["logprobs"][: first["end"]],
        "turn_ids": row["turn_ids"][:1],
        "turn_spans": [first],
    }
    tail = {
        **row,
        "loss_mask": [int(second["start"] <= i < second["end"]) for i in range(len(row["input_ids"]))],
        "turn_ids": row["turn_ids"][1:],
        "turn_spans": [second],
    }
    (group,) = art_trajectory_groups([head, tail], read_graphs(inputs))
    (trajectory,) = group["trajectories"]
    (extra,) = trajectory["additional_histories"]
    for history, cut in ((trajectory, head), (extra, tail)):
        (choice,) = (item for item in history["messages_and_choices"] if is_choice(item))
        ids = [int(TOKEN.match(lp["token"]).group(1)) for lp in choice["logprobs"]["content"]]  # type: ignore[union-attr]
        (span,) = cut["turn_spans"]
        assert ids == cut["input_ids"][span["start"] : span["end"]]
    # The second history holds the first reply as context (a plain message: ART does not train it), then the second.
    kinds = [item.get("role") or "choice" for item in extra["messages_and_choices"]]
    assert kinds == ["system", "user", "assistant", "tool", "choice"]
    assert [item.get("role") or "choice" for item in trajectory["messages_and_choices"]] == ["system", "user", "choice"]


def test_rows_without_a_reward_or_their_graph_are_refused_with_the_fix(tmp_path: Path) -> None:
    inputs = write_rollouts(tmp_path / "logs", EIGHT[:1])
    _, rows, _ = convert(tmp_path / "out", inputs)
    graphs = read_graphs(inputs)
    with pytest.raises(ConfigError, match="no reward") as e:
        art_trajectory_groups([{**rows[0], "reward": None}], graphs)
    assert e.value.code == "reward_missing"
    with pytest.raises(ConfigError, match="not among the graphs") as e:
        art_trajectory_groups(rows, {})
    assert e.value.code == "graph_missing"
    with pytest.raises(ConfigError, match="not an rl row"):
        art_trajectory_groups([{"input_ids": [1]}], graphs)


def test_a_real_tau2_log_becomes_art_groups_that_art_tokenizes_to_the_rows(tmp_path: Path) -> None:
    logs = shared_path("real_logs", "tau2_bench")
    tok = load_named_tokenizer("qwen2.5")  # qwen3's vocabulary, Qwen2.5's prefix-stable tool template
    template = shared_path("tokenizers", "qwen2.5-instruct", "tokenizer_config.json")
    code, rows, _ = convert(
        tmp_path / "out",
        [logs],
        "--group-by",
        "task_id",
        "--tokenizer",
        str(shared_path("tokenizers", "qwen3")),
        "--chat-template",
        str(template),
    )
    assert code == 0 and rows
    groups = art_trajectory_groups(rows, read_graphs([logs]), decode=tok.decode)
    check_art_layout(groups)
    assert sum(len(g["trajectories"]) for g in groups) == len({r["trajectory_id"] for r in rows})
    assert all(t["metadata"]["task_id"] is not None for g in groups for t in g["trajectories"])
    check_against_rows(groups, rows, tok.hf)


def test_art_builds_its_own_objects_from_the_layout(tmp_path: Path) -> None:
    art = pytest.importorskip("art", reason="openpipe-art is not installed (pip install openpipe-art)")
    from openai.types.chat.chat_completion import Choice

    inputs = write_rollouts(tmp_path / "logs", EIGHT)
    _, rows, _ = convert(tmp_path / "out", inputs, "--group-by", "example_id", "--group-size", "2")
    groups = to_art(art_trajectory_groups(rows, read_graphs([tmp_path / "logs"])))
    assert all(isinstance(g, art.TrajectoryGroup) and len(g.trajectories) == 2 for g in groups)
    trajectory = groups[0].trajectories[0]
    choices = [m for m in trajectory.messages_and_choices if isinstance(m, Choice)]
    assert len(choices) == 2 and choices[0].logprobs.content[0].token.startswith("token_id:")
    assert json.loads(trajectory.model_dump_json())["reward"] == trajectory.reward


def test_a_record_convert_rejects_is_left_out_and_the_rest_become_groups(tmp_path: Path) -> None:
    (path,) = write_rollouts(tmp_path / "logs", EIGHT[:1])
    path.write_text(path.read_text() + '{"example_id": 9, "prompt": \n')  # a line cut short
    _, rows, report = convert(tmp_path / "out", [path], "--group-by", "example_id")
    assert report["records"]["rejected"] == 1 and len(rows) == 4
    groups = art_trajectory_groups(rows, read_graphs([path]))
    assert sum(len(g["trajectories"]) for g in groups) == 4
