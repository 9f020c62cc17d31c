"""Eval-harness outputs, RL rollout dumps and chat exports of projects no other test reads, each hand-written here in
the shape of a real file (no third-party data is copied): the run's books against a count made by hand from the real
file, and the context each trained reply sits after.

Provenance of the shapes (repository, path, commit of the real file counted by hand):
- evalscope predictions: modelscope/evalscope ``examples/viz/qwen-plus/predictions/qwen-plus/gsm8k_main.jsonl`` and
  ``reviews/qwen-plus/gsm8k_main.jsonl`` @ 6dfd4bd141d445930186395ed456f7c1e92b6abe (10 lines each, one reply each:
  10 trained; the reply is ``messages[-1]`` and, with the same id, ``model_output.choices[0].message``).
- evalscope 0.x service evaluations: modelscope/evalscope
  ``examples/viz/20250117_154119/predictions/Qwen2.5-0.5B-Instruct/gsm8k_main.jsonl`` (and ``ceval_computer_network``,
  ``arc_ARC-Easy``; their ``reviews/`` twins) @ d09c6fef316e932d33b1a2998e272124a056a6af (10 lines each: the chat
  completion beside ``origin_prompt``, whose ``data[0]`` its server adapter sent as the user message; 10 replies each):
  0 trained before (``no_prompt``), 10 after.
- evalscope tool traces: modelscope/evalscope ``evalscope/web/src/test/fixtures/predictions-tool-trace.json`` @
  5c9aafc370df38ba3210057ec7ff59caa7c003b1 (two predictions, 3 + 1 replies; Inspect AI's message models: calls
  ``{id, function, arguments}``, a failed tool's ``error: {type, message}``): 0 trained before, 4 after.
- Atropos rollout groups: NousResearch/atropos ``environments/community/selcube/rubiks_process_results_32.jsonl`` @
  65108d12b2082ba67a6aba51476dfb46db22f037 (6 groups of 4 rollouts, ``tokens`` / ``masks`` / ``scores`` first,
  ~450 KB a line, then ``messages``; roles ``system`` / ``environment`` / ``agent``; each step's group re-sends the
  steps before it: 48 agent messages, 24 rollouts' replies, 24 copies of the steps chosen before a group):
  unrecognised before, then 18 trained and 30 duplicates (the scores unread), then 24 trained, each rl row with its
  rollout's score as its reward, the 24 copies context booked as ``context_unknown`` (found 48 for 24 sampled
  replies); now found 24 = 24 trained, the 24 copies counted apart (``history_copies``), 6 groups of 4 rollouts
  sharing their ``group_id``.
- n samples of one prompt with a reward each: RLHFlow/Online-RLHF ``annotate_data/get_rewards.py`` @
  138f5278cb2859e63deacde832a31c5d0a6e22f8 writes ``{"type": "text_only", "instances": [{"prompt", "responses",
  "rewards"}]}`` (the prompt its chat template rendered, ``generation/gen_hf.py``; K responses, a reward each): read as
  one conversation per instance with sibling replies and one reward (or not at all: unrecognised) before; now K
  rollouts per instance, each its own reward, one group. A GRPO step's ``{prompt: [messages], completions, rewards}``
  read the prompt alone before (0 found, the completions lost to the books); offline GRPO rollouts ``{prompt,
  rollouts: [{completion, code, reward, renders, ...}]}`` (a grpo_rollouts.jsonl generator's shape) unrecognised.
- Atropos rollout groups written as text: NousResearch/atropos ``environments/cybersec_env_outputs/objreward.jsonl``
  @ dd1b1fe3e3c7d29ac6071c3da1e467f7853cea43 (2 groups of 8 rollouts, each ``messages[i]`` the whole conversation
  its Llama 3 template rendered, system + user + the sampled reply closed by ``<|eot_id|>``: 16 replies, unrecognised
  before, 16 trained after, each after the prompt its text holds).
- chat-ui LLM call logs: huggingface/chat-ui ``llm-logs/2025-11-10T14-28-50-544Z_openai_chat_completions_unknown.json``,
  ``...14-28-50-849Z_..._6911f6a2ab995eb54c81645b.json``, ``...14-29-03-788Z_..._6911f6a2ab995eb54c81645b.json`` @
  815469ecf88c696a4151f16f8ad0f1ed79402d2c (three requests ``{provider, model, body: {model, messages, tools?},
  headers}``, no response logged: the title call, the first call ``[user "hello"]`` to one model, then a call to
  another model whose ``body.messages`` carry the first call's reply after a system prompt and tools the first call
  was never sent): 1 reply trained before, after a system prompt and tools it never saw; 0 after, the three requests
  skipped as requests without their responses.
- WildBench judged results: allenai/WildBench
  ``eval_results/v2.0625/score.v2/eval=gpt-4o-2024-05-13/reka-edge.json`` @ 88704b7b8d5fb6c448b8e8c3c0ebd671f710c492 (a
  JSON array of ``{session_id, parsed_result, meta_data, model_test, score, model_output}``: each tested reply without
  the task it answers, which lives in the benchmark's dataset; an empty ``model_output`` is no reply): nothing
  trainable, the non-empty replies counted as lost, before and after.
- AgentBench run logs: THUDM/AgentBench ``outputs/Jan17v1/gpt-4o-mini/medagentbench-std/runs.jsonl`` (and the
  gemini-2.0, llama-3.3 runs beside it) @ 45ae4f9e334a901c8cc427a0809a3dbd19adbc94 (``{index, error, info, output:
  {status, result, history: [{role: user | agent, content}]}, time}``; 210, 86 and 209 agent replies: all trained
  before and after, each after its own history).
- LobeChat session export v1: lobehub/lobe-chat ``src/migrations/FromV1ToV2/fixtures/input-v1-session.json`` @
  5e13b4b34270ed9bce88473a8cd09ba5ea2508e9 (``state.sessions.<id>.chats`` keyed by id; only replies name a
  ``parentId``, the user messages none, two ``topicId`` threads, ``config.systemRole``; one reply's parent is not in
  the export): one orphan rejected all six replies before; now refused as a whole for what its links cannot say (the
  history each reply was sent), and in a true tree an orphan costs only its own branch.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from msgtrain.export.dedupe import DUPLICATE
from msgtrain.ingest.boundary import read_events
from msgtrain.ingest.core.base import ReadGraph
from msgtrain.ingest.detect import detect_format
from msgtrain.linearize.loading import load_tokenizer
from msgtrain.run.config import ConvertConfig
from msgtrain.run.pipeline import convert
from msgtrain.tools.explain_cmd import explain_file


def _write(path: Path, value: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def _jsonl(path: Path, records: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _run(inputs: Path, out: Path) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The run's turn books and every trained (context, reply) pair as text (the demo tokenizer)."""
    report = convert(ConvertConfig(inputs=(inputs,), output=out))
    tok = load_tokenizer(None).base
    pairs = []
    for f in sorted((out / "data").glob("*.parquet")):
        for row in pq.read_table(f, columns=["input_ids", "turn_spans"]).to_pylist():
            ids = row["input_ids"]
            for s in row["turn_spans"]:
                pairs.append((tok.decode(ids[: s["start"]]), tok.decode(ids[s["start"] : s["end"]])))
    return report["turns"], pairs


def _text(message: Any) -> str:
    result = getattr(message, "result", None)
    return str(result.result) if result is not None else getattr(message, "text", "") or ""


def _contexts(path: Path) -> list[list[tuple[str, str]]]:
    """(role, text) along the path to each sampled reply, the reply last (a result's text; "" for only calls)."""
    out: list[list[tuple[str, str]]] = []
    for ev in read_events(detect_format(path), path):
        if not isinstance(ev, ReadGraph):
            continue
        g = ev.graph
        for node in g.nodes.values():
            if node.origin.value == "sampled":
                out.append([(n.message.role, _text(n.message)) for n in g.path(node.id)])
    return out


# ------------------------------------------------------------------------------------------------ evalscope
def _evalscope_prediction(index: int, question: str, answer: str) -> dict[str, Any]:
    reply = {"id": f"r{index}", "content": answer, "source": "generate", "role": "assistant", "tool_calls": None}
    return {
        "index": index,
        "model": "qwen-plus",
        "model_output": {
            "id": f"chatcmpl-{index}",
            "model": "qwen-plus",
            "choices": [{"message": reply, "stop_reason": "stop", "logprobs": None}],
            "usage": {"input_tokens": 20, "output_tokens": 5, "total_tokens": 25},
        },
        "messages": [{"id": f"u{index}", "content": question, "source": None, "role": "user"}, reply],
        "metadata": {"reasoning": "worked solution"},
    }


def _evalscope_review(prediction: dict[str, Any]) -> dict[str, Any]:
    reply = prediction["messages"][-1]["content"]
    return {
        "index": prediction["index"],
        "target": "3",
        "messages": prediction["messages"],
        "trajectory": [],
        "sample_score": {"score": {"value": {"acc": 1.0}, "prediction": reply, "extracted_prediction": "3"}},
    }


def test_an_eval_harness_prediction_logging_its_reply_twice_trains_it_once(tmp_path: Path) -> None:
    predictions = [_evalscope_prediction(i, f"Question {i}?", f"Answer {i}.") for i in range(3)]
    path = _jsonl(tmp_path / "run" / "predictions" / "gsm8k_main.jsonl", predictions)
    turns, pairs = _run(path, tmp_path / "out")
    assert (turns["found"], turns["trained"]) == (3, 3)  # one reply a line, not messages[-1] and the choice apart
    assert all(ctx.endswith("assistant\n") and ctx.count("<|im_start|>") == 2 for ctx, _ in pairs)
    # the reviews file beside it repeats each (question, reply): the run trains each pair once
    _jsonl(tmp_path / "run" / "reviews" / "gsm8k_main.jsonl", [_evalscope_review(p) for p in predictions])
    turns, pairs = _run(tmp_path / "run", tmp_path / "out2")
    assert (turns["found"], turns["trained"], turns["dropped_by_reason"]) == (6, 3, {DUPLICATE: 3})
    assert len(set(pairs)) == len(pairs) == 3


def _trace_prediction() -> dict[str, Any]:
    """Two runs of a tool-using agent in Inspect AI's message models, as evalscope's predictions keep them."""
    return {
        "predictions": [
            {
                "Index": "0",
                "Input": "7 notebooks at 3 dollars, paid with 50: change?",
                "Generated": "29 dollars.",
                "Messages": [
                    {"id": "s0", "role": "system", "content": "You are a math assistant. Use the calculator."},
                    {"id": "u0", "role": "user", "content": "7 notebooks at 3 dollars, paid with 50: change?"},
                    {
                        "id": "a0",
                        "role": "assistant",
                        "content": [
                            {"type": "reasoning", "reasoning": "7 * 3 first."},
                            {"type": "text", "text": "Computing the cost."},
                        ],
                        "tool_calls": [{"id": "c1", "function": "calculator", "arguments": {"expression": "7 * 3"}}],
                    },
                    {"id": "t0", "role": "tool", "tool_call_id": "c1", "function": "calculator", "content": "21"},
                    {
                        "id": "a1",
                        "role": "assistant",
                        "content": [{"type": "text", "text": "Cost is 21."}],
                        "tool_calls": [{"id": "c2", "function": "calculator", "arguments": {"expression": "50 - 21"}}],
                    },
                    {"id": "t1", "role": "tool", "tool_call_id": "c2", "function": "calculator", "content": "29"},
                    {"id": "a2", "role": "assistant", "content": [{"type": "text", "text": "29 dollars."}]},
                ],
            },
            {
                "Index": "1",
                "Input": "Population of Exampleville?",
                "Generated": "",
                "Messages": [
                    {"id": "s1", "role": "system", "content": "You are a research assistant."},
                    {"id": "u1", "role": "user", "content": "Population of Exampleville?"},
                    {
                        "id": "a3",
                        "role": "assistant",
                        "content": [{"type": "reasoning", "reasoning": "Look it up."}],
                        "tool_calls": [{"id": "c3", "function": "web_lookup", "arguments": {"query": "Exampleville"}}],
                    },
                    {
                        "id": "t2",
                        "role": "tool",
                        "tool_call_id": "c3",
                        "function": "web_lookup",
                        "content": "",
                        "error": {"type": "ToolExecutionError", "message": "upstream returned 503"},
                    },
                    # not in the real file (its run ended on the error): a reply after the failed call, to see the
                    # error text the model was sent in the result's place
                    {"id": "a4", "role": "assistant", "content": "The lookup failed."},
                ],
            },
        ]
    }


def test_inspect_shaped_calls_and_tool_errors_are_read_in_any_document(tmp_path: Path) -> None:
    path = _write(tmp_path / "predictions-tool-trace.json", _trace_prediction())
    turns, _ = _run(path, tmp_path / "out")
    assert (turns["found"], turns["trained"]) == (5, 5)  # the real file's 3 + 1, and the reply added after the error
    contexts = _contexts(path)
    assert [[r for r, _ in c] for c in contexts] == [
        ["system", "user", "assistant"],
        ["system", "user", "assistant", "tool", "assistant"],
        ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"],
        ["system", "user", "assistant"],
        ["system", "user", "assistant", "tool", "assistant"],
    ]
    graph = next(e.graph for e in read_events(detect_format(path), path) if isinstance(e, ReadGraph))
    calls = [c.option_name for n in graph.nodes.values() for c in getattr(n.message, "calls", ())]
    assert calls == ["calculator", "calculator"]
    assert contexts[4][3] == ("tool", "Error: upstream returned 503")  # what Inspect sends for a failed call


# ------------------------------------------------------------------------------------------------ Atropos
def _atropos_group(history: list[dict[str, str]], replies: list[str], after: str | None) -> dict[str, Any]:
    """One scored group: each rollout the history, then its own reply (and the environment's answer)."""
    messages = []
    for reply in replies:
        rollout = [*history, {"role": "agent", "content": reply}]
        if after is not None:
            rollout.append({"role": "environment", "content": after})
        messages.append(rollout)
    tokens = [[128000 + (i % 7) for i in range(6000)] for _ in replies]  # token arrays first: ~30 KB each
    return {
        "seed": 263075,
        "tokens": tokens,
        "masks": [[-100] * 5990 + t[5990:] for t in tokens],
        "scores": [0.5 - 0.1 * k for k in range(len(replies))],
        "messages": messages,
        "parsed_actions": ["U"] * len(replies),
        "ref_logprobs": None,
    }


def test_rl_rollout_groups_with_their_messages_past_the_head_are_read_once_per_reply(tmp_path: Path) -> None:
    system = {"role": "system", "content": "You solve Rubik's cubes."}
    state0 = {"role": "environment", "content": "Cube state 0."}
    step0 = ["Move U.", "Move R.", "Move U.", "Move F."]  # two rollouts sampled the same reply
    best = {"role": "agent", "content": "Move U."}
    state1 = {"role": "environment", "content": "Cube state 1."}
    groups = [
        _atropos_group([system, state0], step0, "Cube state 1."),
        _atropos_group([system, state0, best, state1], ["Move L.", "Move B.", "Move L.", "Move D."], None),
    ]
    path = _jsonl(tmp_path / "rubiks_process_results.jsonl", groups)
    assert path.read_bytes().index(b'"messages"') > 64 * 1024  # past the head format detection reads
    assert detect_format(path).name == "structural"
    turns, pairs = _run(path, tmp_path / "out")
    # 12 agent messages: the 8 replies sampled, each a scored rollout of its own (two rollouts sampling the same
    # reply are two rollouts, each with its score), and 4 copies of the step chosen, which every rollout of the second
    # group was started from: history, a copy of a reply sampled in the first group, counted apart, never trained again
    assert (turns["found"], turns["trained"], turns["dropped_by_reason"]) == (8, 8, {})
    assert turns["history_copies"] == 4
    # the environment's observations are what the policy was told: user turns, each reply after exactly its step
    assert len(set(pairs)) == 6 and all(c.startswith("<|im_start|>system\nYou solve") for c, _ in pairs)
    second = sorted(r for c, r in pairs if "Cube state 1." in c)
    assert second == ["Move B.<|im_end|>", "Move D.<|im_end|>", "Move L.<|im_end|>", "Move L.<|im_end|>"]
    assert all(c.count("<|im_start|>user\n") == 2 and "Move U." in c for c, _ in pairs if "Cube state 1." in c)


def test_each_rollout_of_a_scored_group_carries_its_own_score_as_the_rl_rows_reward(tmp_path: Path) -> None:
    # an Atropos ScoredDataGroup keeps one score per rollout in ``scores``, item for item with ``messages`` (chat
    # messages, or the texts a chat template rendered): each rollout's rl row carries its score as its reward
    system = {"role": "system", "content": "You solve Rubik's cubes."}
    state0 = {"role": "environment", "content": "Cube state 0."}
    group = _atropos_group([system, state0], ["Move U.", "Move R.", "Move F."], None)  # scores 0.5, 0.4, 0.3
    rendered = dict(group, scores=[1.0, -1.0])
    rendered["messages"] = [
        "<|im_start|>user\nName a prime.<|im_end|>\n<|im_start|>assistant\n7<|im_end|>",
        "<|im_start|>user\nName a prime.<|im_end|>\n<|im_start|>assistant\n9<|im_end|>",
    ]
    path = _jsonl(tmp_path / "groups.jsonl", [group, rendered])
    report = convert(ConvertConfig(inputs=(path,), output=tmp_path / "out", target="rl"))
    assert report["turns"]["trained"] == 5
    rows = [r for f in sorted((tmp_path / "out" / "data").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    tok = load_tokenizer(None).base
    rewards = {tok.decode(r["input_ids"]).rsplit("<|im_start|>assistant\n", 1)[1].strip(): r["reward"] for r in rows}
    assert rewards == {"Move U.<|im_end|>": 0.5, "Move R.<|im_end|>": 0.4, "Move F.<|im_end|>": 0.3, "7<|im_end|>": 1.0,
                       "9<|im_end|>": -1.0}  # fmt: skip
    # each group's rollouts are one group: one group_id, named in their metadata (a --group-by key)
    assert sorted(Counter(r["group_id"] for r in rows).values()) == [2, 3]
    assert sorted(Counter(json.loads(r["metadata"])["rollout_group"] for r in rows).values()) == [2, 3]


# ------------------------------------------------------------------------------------------------ n samples, n rewards
def _chatml_prompt(system: str, user: str) -> str:
    return f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def _rl_rows(out: Path) -> list[dict[str, Any]]:
    return [r for f in sorted((out / "data").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]


def test_n_samples_of_one_prompt_with_a_reward_each_are_n_rollouts_of_one_group(tmp_path: Path) -> None:
    # RLHFlow's best-of-n files (LMFlow's {"type", "instances"}): the prompt its chat template rendered, the n
    # responses sampled for it, and the reward model's reward for each, item for item
    p0, p1 = _chatml_prompt("You are terse.", "Name a prime."), _chatml_prompt("You are terse.", "Name a square.")
    instances = [
        {"prompt": p0, "responses": ["7", "9", "7", "4"], "rewards": [1.0, -1.0, 1.0, -1.0]},  # two identical samples
        {"prompt": p1, "responses": ["4", "5", "9"], "rewards": [0.9, 0.0, 0.6]},
    ]
    path = _write(tmp_path / "iter2_K4_Mreward.json", {"type": "text_only", "instances": instances})
    assert detect_format(path).name == "structural"
    report = convert(ConvertConfig(inputs=(path,), output=tmp_path / "out", target="rl", group_by="rollout_group"))
    # 7 samples: 7 rollouts, each trained once (the two identical samples are two rollouts with their own rewards)
    assert (report["turns"]["found"], report["turns"]["trained"], report["turns"]["dropped"]) == (7, 7, 0)
    rows = _rl_rows(tmp_path / "out")
    tok = load_tokenizer(None).base
    got = []
    for r in rows:
        (span,) = r["turn_spans"]  # one trained reply a row
        ids = r["input_ids"]
        got.append((tok.decode(ids[: span["start"]]), tok.decode(ids[span["start"] : span["end"]]), r["reward"]))
    assert len({r["trajectory_id"] for r in rows}) == 7 and all(r["weight"] == 1.0 for r in rows)
    # each sample after exactly its prompt: the same context, token for token, across the n samples of a prompt
    assert sorted(got) == sorted(
        [(p0, t + "<|im_end|>", w) for t, w in zip(["7", "9", "7", "4"], [1.0, -1.0, 1.0, -1.0], strict=True)]
        + [(p1, t + "<|im_end|>", w) for t, w in zip(["4", "5", "9"], [0.9, 0.0, 0.6], strict=True)]
    )
    assert len({tuple(r["input_ids"][: r["turn_spans"][0]["start"]]) for r in rows}) == 2
    # GRPO groups of n, by hand: rewards (1, -1, 1, -1) have mean 0, sample std sqrt(4/3); (0.9, 0, 0.6) mean 0.5,
    # sample std sqrt((0.16 + 0.25 + 0.01) / 2) = sqrt(0.21)
    by_group: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        by_group.setdefault(r["group_id"], []).append((r["reward"], r["advantage"]))
    assert sorted(len(g) for g in by_group.values()) == [3, 4]
    expected = {1.0: 1 / (4 / 3) ** 0.5, -1.0: -1 / (4 / 3) ** 0.5, 0.9: 0.4 / 0.21**0.5, 0.0: -0.5 / 0.21**0.5,
                0.6: 0.1 / 0.21**0.5}  # fmt: skip
    for members in by_group.values():
        for reward, advantage in members:
            assert abs(advantage - expected[reward]) < 1e-3  # eps 1e-4 in the denominator
    # without --group-by the rows of one prompt's samples share their group_id too (the GRPO group, verl's uid)
    plain = convert(ConvertConfig(inputs=(path,), output=tmp_path / "plain", target="rl"))
    assert plain["turns"]["trained"] == 7
    assert sorted(Counter(r["group_id"] for r in _rl_rows(tmp_path / "plain")).values()) == [3, 4]
    # --group-by @prompt (the tokens before the first trained one) makes the same groups
    convert(ConvertConfig(inputs=(path,), output=tmp_path / "prompt", target="rl", group_by="@prompt"))
    by_prompt = {(r["reward"], round(r["advantage"], 9)) for r in _rl_rows(tmp_path / "prompt")}
    assert by_prompt == {(r["reward"], round(r["advantage"], 9)) for r in rows}


def test_a_rollout_dump_keeping_a_reward_in_each_sample_or_beside_them_trains_every_sample(tmp_path: Path) -> None:
    # a GRPO step's dump: the prompt's messages, the completions and their rewards, the step; and offline GRPO's
    # {prompt, rollouts: [{completion, code, reward, renders, ...}], mean_reward} (a reward in each rollout)
    step = [
        {"prompt": [{"role": "user", "content": q}], "completions": cs, "rewards": rs, "step": 3}
        for q, cs, rs in (("2+2?", ["4", "5", "4"], [1, 0, 1]), ("3+3?", ["6", "7"], [1, 0]))
    ]
    offline = {
        "prompt": "Animate a circle.",
        "rollouts": [
            {"completion": "circle()", "code": "circle()", "reward": 1.0, "renders": True},
            {"completion": "square()", "code": "square()", "reward": 0.0, "renders": False},
        ],
        "mean_reward": 0.5,
    }
    folder = tmp_path / "logs"
    _jsonl(folder / "grpo_step3.jsonl", step)
    _jsonl(folder / "grpo_rollouts.jsonl", [offline])
    report = convert(ConvertConfig(inputs=(folder,), output=tmp_path / "out", target="rl", group_by="rollout_group"))
    assert (report["turns"]["found"], report["turns"]["trained"]) == (7, 7)  # 3 + 2 + 2 samples, each its rollout
    rows = _rl_rows(tmp_path / "out")
    groups = Counter(r["group_id"] for r in rows)
    assert sorted(groups.values()) == [2, 2, 3]
    meta = [json.loads(r["metadata"]) for r in rows]
    assert sorted(m.get("step") for m in meta if "step" in m) == [3] * 5  # the record's own fields, on each rollout
    assert sorted((m["code"], m["renders"]) for m in meta if "code" in m) == [("circle()", True), ("square()", False)]
    assert sorted(r["advantage"] for r in rows if r["group_id"] == groups.most_common(1)[0][0])[0] < 0  # "5": 0


def test_candidates_a_judge_rated_stay_judged_not_rollouts(tmp_path: Path) -> None:
    # distilabel's UltraFeedback output (generations beside a judge's ratings): the best-rated is the reply to train,
    # the others judged worse (trained with --train-negative); they are not rollouts of one group
    path = _jsonl(tmp_path / "rated.jsonl", [{"instruction": "Name a color.", "generations": ["Blue", "Banana"],
                                             "ratings": [5, 1]}])  # fmt: skip
    report = convert(ConvertConfig(inputs=(path,), output=tmp_path / "out"))
    assert (report["turns"]["trained"], report["turns"]["dropped_by_reason"]) == (1, {"negative_label": 1})


# ------------------------------------------------------------------------------------------------ AgentBench
def test_an_agent_benchmark_run_log_trains_each_agent_reply_after_its_history(tmp_path: Path) -> None:
    def run(index: int, turns: list[tuple[str, str]], status: str) -> dict[str, Any]:
        history = [{"role": role, "content": text} for role, text in turns]
        return {
            "index": index,
            "error": None,
            "info": None,
            "output": {"index": index, "status": status, "result": "[-1]", "history": history},
            "time": {"timestamp": 1737138742126, "str": "2025-01-17 10:32:22"},
        }

    task = "You are an expert in using FHIR functions. Question: the last HbA1C of patient S1?"
    runs = [
        run(96, [("user", task), ("agent", "GET /Observation?code=A1C"), ("user", "Here is the response: {}"),
                 ("agent", "FINISH([-1])")], "completed"),
        run(90, [("user", task), ("agent", "POST /Observation\n{}"), ("user", "Invalid POST request"),
                 ("agent", "FINISH([-1])")], "agent invalid action"),
    ]  # fmt: skip
    path = _jsonl(tmp_path / "runs.jsonl", runs)
    turns, pairs = _run(path, tmp_path / "out")
    assert (turns["found"], turns["trained"]) == (4, 4)  # every agent message, the invalid action's run included
    contexts = sorted(_contexts(path), key=len)
    assert [[r for r, _ in c] for c in contexts] == [["user", "assistant"]] * 2 + [["user", "assistant"] * 2] * 2
    finish = sorted(c for c, r in pairs if r == "FINISH([-1])<|im_end|>")
    assert len(finish) == 2 and "Here is the response" in finish[0] and "Invalid POST request" in finish[1]


# ------------------------------------------------------------------------------------------------ parent links
def test_an_orphan_costs_only_its_branch_and_the_books_count_its_replies(tmp_path: Path) -> None:
    messages = [
        {"id": "a", "parentId": None, "role": "user", "content": "hi"},
        {"id": "b", "parentId": "a", "role": "assistant", "content": "hello"},
        {"id": "c", "parentId": "b", "role": "user", "content": "more?"},
        {"id": "d", "parentId": "c", "role": "assistant", "content": "sure"},
        {"id": "x", "parentId": "gone", "role": "assistant", "content": "lost reply"},  # its parent was not exported
        {"id": "y", "parentId": "x", "role": "user", "content": "q"},
        {"id": "z", "parentId": "y", "role": "assistant", "content": "lost too"},
    ]
    path = _write(tmp_path / "export.json", {"conversation": {"title": "t", "messages": messages}})
    turns, pairs = _run(path, tmp_path / "out")
    assert (turns["trained"], turns["in_rejected_records"]) == (2, 2)  # was 0 and 0: the whole record rejected
    assert [r for _, r in pairs] == ["hello<|im_end|>", "sure<|im_end|>"]
    # one message per line: the lines below an orphan are records of the books too, their replies counted lost
    lines = _jsonl(tmp_path / "lines" / "tree.jsonl", messages)
    report = convert(ConvertConfig(inputs=(lines,), output=tmp_path / "out2"))
    assert report["records"]["read"] == 7 and report["records"]["rejected_by_reason"] == {"orphan_message": 3}
    assert (report["turns"]["trained"], report["turns"]["in_rejected_records"]) == (2, 2)  # were 2 and 1: z lost


def test_links_that_only_pair_replies_with_prompts_are_refused_not_read_as_one_prompt_chats(tmp_path: Path) -> None:
    def chat(i: str, role: str, text: str, topic: str, parent: str | None = None) -> dict[str, Any]:
        out = {"content": text, "createAt": 1698754460196 + len(i), "id": i, "meta": {}, "role": role}
        return out | {"topicId": topic} | ({"parentId": parent} if parent else {})

    chats = [
        chat("u1", "user", "How do I start postgres in Docker?", "T1"),
        chat("a1", "assistant", "docker run postgres", "T1", "u1"),
        chat("u2", "user", "And keep its data in /www/db?", "T1"),  # sent after u1 and a1, which no link says
        chat("a2", "assistant", "Add -v /www/db:/var/lib/postgresql/data", "T1", "u2"),
    ]
    session = {"chats": {c["id"]: c for c in chats}, "config": {"systemRole": "You are a Postgres expert."}}
    path = _write(tmp_path / "lobechat.json", {"exportType": "sessions", "state": {"sessions": {"s1": session}}})
    forced = ConvertConfig(inputs=(path,), output=tmp_path / "out", input_format="structural", allow_empty=True)
    report = convert(forced)
    # never a2 trained after u2 alone: the history it was sent (u1, a1) is not in the links
    assert report["turns"]["trained"] == 0 and report["records"]["rejected_by_reason"] == {"ambiguous_structure": 1}


# ------------------------------------------------------------------------------------------------ rendered rollouts
def _llama3(system: str, user: str, reply: str) -> str:
    head = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
    return (
        f"{head}{system}<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n{user}<|eot_id|>"
        f"<|start_header_id|>assistant<|end_header_id|>\n\n{reply}<|eot_id|>"
    )


def test_rl_rollouts_logged_as_rendered_conversations_train_each_reply_after_its_own_prompt(tmp_path: Path) -> None:
    system = "You are a detection engineer. Think in <think></think>, then answer in \\boxed{}."
    replies = ["<think>a</think>\\boxed{rule A}", "<think>b</think>\\boxed{rule B}", "<think>a</think>\\boxed{rule A}"]
    groups = [
        {"tokens": [[1, 2, 3]] * 3, "masks": [[-100, 2, 3]] * 3, "scores": [0.5, 0.2, 0.5], "ref_logprobs": None,
         "messages": [_llama3(system, "Detect a DLL load.", r) for r in replies]},
        {"tokens": [[1, 2]] * 2, "masks": [[-100, 2]] * 2, "scores": [0.1, 0.0], "ref_logprobs": None,
         "messages": [_llama3(system, "Detect a new service.", r) for r in ("\\boxed{S}", "<think>c</think>")]},
    ]  # fmt: skip
    path = _jsonl(tmp_path / "objreward.jsonl", groups)
    assert detect_format(path).name == "structural"
    turns, pairs = _run(path, tmp_path / "out")
    # five rollouts, one reply each, each with its own score (the group's two identical samples are two rollouts)
    assert (turns["found"], turns["trained"], turns["dropped_by_reason"]) == (5, 5, {})
    contexts = _contexts(path)
    assert all([r for r, _ in c] == ["system", "user", "assistant"] and c[0][1] == system for c in contexts)
    assert [c[2][1] for c in contexts] == [*replies, "\\boxed{S}", "<think>c</think>"]  # no end token, no header
    assert all(c.count("<|im_start|>system") == 1 for c, _ in pairs)  # the text's system prompt, once
    explained = explain_file(path)
    assert explained.conversations == {"rendered conversation": 5} and not explained.mapping_yaml  # no --map reads it


def test_a_list_of_texts_not_all_whole_rendered_conversations_is_not_read_as_rollouts(tmp_path: Path) -> None:
    cut = _llama3("S", "U", "R").removesuffix("<|eot_id|>")  # a reply cut before its end token: its end unknown
    path = _jsonl(tmp_path / "rollouts.jsonl", [{"messages": [_llama3("S", "U", "R"), cut], "scores": [1, 0]}])
    report = convert(ConvertConfig(inputs=(path,), output=tmp_path / "out", allow_empty=True))
    assert report["turns"]["trained"] == 0 and report["records"]["rejected_by_reason"] == {"unknown_format": 1}


# ------------------------------------------------------------------------------------------------ --explain, pasted
def test_the_mapping_explain_prints_for_these_shapes_converts_them_the_same(tmp_path: Path) -> None:
    # an RL group of message lists (``messages: messages[]``, each item a conversation) and an eval prediction whose
    # response object beside ``messages`` is a copy of the reply the list ends with: both refused before when pasted
    system = {"role": "system", "content": "Solve the cube."}
    group = _atropos_group([system, {"role": "environment", "content": "State 0."}], ["U.", "R."], "State 1.")
    group["tokens"] = group["masks"] = [[1], [2]]
    inputs = {
        "group.jsonl": [group],
        "predictions.jsonl": [_evalscope_prediction(i, f"Q{i}?", f"A{i}.") for i in range(2)],
    }
    for name, records in inputs.items():
        path = _jsonl(tmp_path / name, records)
        mapping = tmp_path / f"{name}.map.yaml"
        mapping.write_text(explain_file(path).mapping_yaml, encoding="utf-8")
        plain = convert(ConvertConfig(inputs=(path,), output=tmp_path / f"{name}.plain"))["turns"]
        mapped = ConvertConfig(inputs=(path,), output=tmp_path / f"{name}.mapped", mapping=str(mapping))
        pasted = convert(mapped)["turns"]
        assert plain == pasted and plain["trained"] == 2, name


def test_an_eval_response_beside_the_input_it_was_made_from_trains_after_that_input(tmp_path: Path) -> None:
    def line(i: int, question: str, reply: str, system: str | None = None) -> dict[str, Any]:
        origin: dict[str, Any] = {"data": [question], "raw_input": {"question": question, "answer": "3"}}
        if system is not None:
            origin["system_prompt"] = system
        return {
            "id": f"chat-{i}",
            "object": "chat.completion",
            "model": "Qwen2.5-0.5B-Instruct",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
            "model_spec": {"api_url": "http://127.0.0.1:8801/v1/chat/completion", "model_id": "Qwen2.5-0.5B-Instruct"},
            "answer_id": f"answer-{i}",
            "subset_name": "main",
            "raw_input": {"question": question, "answer": "3"},
            "origin_prompt": origin,
        }

    path = _jsonl(
        tmp_path / "gsm8k_main.jsonl",
        [line(0, "Question: 1+2?", "3"), line(1, "Question: 2+1?", "It is 3.", system="Answer briefly.")],
    )
    turns, _ = _run(path, tmp_path / "out")
    assert (turns["found"], turns["trained"]) == (2, 2)  # was 0: no_prompt, both replies lost
    assert _contexts(path) == [
        [("user", "Question: 1+2?"), ("assistant", "3")],
        [("system", "Answer briefly."), ("user", "Question: 2+1?"), ("assistant", "It is 3.")],
    ]


def test_a_request_body_logged_without_its_response_trains_no_history_reply(tmp_path: Path) -> None:
    def log(model: str, messages: list[dict[str, Any]], **body: Any) -> dict[str, Any]:
        return {
            "timestamp": "2025-11-10T14:28:50.849Z",
            "provider": "openai",
            "baseURL": "https://router.example/v1",
            "completion": "chat_completions",
            "model": model,
            "streaming": True,
            "conversationId": "6911f6a2",
            "body": {"model": model, "messages": messages, "stream": True, **body},
            "headers": {"X-use-cache": "false"},
        }

    hello = {"role": "user", "content": "hello"}
    tools = [{"type": "function", "function": {"name": "web_search", "parameters": {"type": "object"}}}]
    first = log("router-model", [hello])
    system = {"role": "system", "content": "You can use web_search."}
    later = log("agent-model", [system, hello, {"role": "assistant", "content": "Hi!"}, hello], tools=tools)
    _write(tmp_path / "logs" / "1.json", first)
    _write(tmp_path / "logs" / "2.json", later)
    report = convert(ConvertConfig(inputs=(tmp_path / "logs",), output=tmp_path / "out", allow_empty=True))
    # "Hi!" was sampled by the first call, sent no system prompt and no tools: never trained after the later ones
    assert report["turns"]["trained"] == 0 and report["records"]["skipped"] == 2


def test_judged_replies_without_the_tasks_they_answer_are_lost_in_the_books_not_trained(tmp_path: Path) -> None:
    def judged(session: str, output: str, score: str) -> dict[str, Any]:
        return {
            "session_id": session,
            "parsed_result": {"strengths": "Clear.", "weaknesses": "Short.", "score": score},
            "meta_data": {"batch_req_id": f"batch_req_{session}", "usage": {"prompt_tokens": 300}, "error": None},
            "model_test": "reka/reka-edge",
            "score": score,
            "model_output": output,
        }

    rows = [judged("ae00", "", "1"), judged("8e03", "The plan is a framework.", "4"), judged("e0a2", "Step 1.", "4")]
    path = _write(tmp_path / "reka-edge.json", rows)
    report = convert(ConvertConfig(inputs=(path,), output=tmp_path / "out", allow_empty=True))
    assert (report["turns"]["trained"], report["turns"]["in_rejected_records"]) == (0, 2)  # the empty output: none
