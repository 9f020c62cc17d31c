"""RL groups across files (``--group-by``, ``--group-size``), one weight per trajectory, group advantages, and TRL's
GRPO ``rollout_func`` path replaying the logged groups.

The rollouts are verifiers-shaped (``vf-eval`` results.jsonl lines: ``example_id``, ``prompt``, ``completion``,
``reward``; the shape of ``sample_logs/verifiers/results.jsonl``), written here: four tasks, two rollouts each, spread
over two files so a group is only whole across files.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from msgtrain.cli import main
from msgtrain.export.groups import ADVANTAGE_EPS, GroupPlanner, group_id_of
from msgtrain.export.schema import samples_to_table
from msgtrain.export.targets import to_rl
from tests.conftest import tiny_llama
from tests.test_export import fixed_samples


def rollout(example: int, attempt: int, reward: float, tool: bool = True) -> dict[str, Any]:
    question = f"What is {example} + {example}?"
    completion: list[dict[str, Any]] = []
    if tool:
        call = {
            "id": f"c{example}{attempt}",
            "type": "function",
            "function": {"name": "add", "arguments": json.dumps({"a": example, "b": example})},
        }
        completion += [
            {"role": "assistant", "content": "", "tool_calls": [json.dumps(call)]},
            {"role": "tool", "content": str(2 * example), "tool_call_id": f"c{example}{attempt}"},
        ]
    completion.append({"role": "assistant", "content": f"attempt {attempt}: {2 * example + (reward < 1)}"})
    return {
        "example_id": example,
        "task": "arith",
        "prompt": [{"role": "system", "content": "Add."}, {"role": "user", "content": question}],
        "completion": completion,
        "reward": reward,
        "answer": str(2 * example),
        "info": {},
    }


def write_rollouts(folder: Path, spec: list[list[tuple[int, int, float]]]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, lines in enumerate(spec):
        path = folder / f"results-{i}.jsonl"
        path.write_text("".join(json.dumps(rollout(e, a, r)) + "\n" for e, a, r in lines))
        paths.append(path)
    return paths


# Four tasks, two rollouts each; each file holds one rollout of every task.
EIGHT = [
    [(0, 0, 1.0), (1, 0, 0.0), (2, 0, 1.0), (3, 0, 0.5)],
    [(0, 1, 0.0), (1, 1, 0.0), (2, 1, 1.0), (3, 1, 1.0)],
]


def convert(out: Path, inputs: list[Path], *args: str) -> tuple[int, list[dict[str, Any]], dict[str, Any]]:
    code = main(["convert", *map(str, inputs), "-o", str(out), "--target", "rl", *args])
    rows: list[dict[str, Any]] = []
    for f in sorted((out / "data").glob("*.parquet")):
        rows.extend(pq.read_table(f).to_pylist())
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else {}
    return code, rows, report


def test_eight_rollouts_of_four_tasks_make_four_groups_of_two_across_files(tmp_path: Path) -> None:
    inputs = write_rollouts(tmp_path / "logs", EIGHT)
    code, rows, report = convert(tmp_path / "out", inputs, "--group-by", "example_id")
    assert code == 0 and len(rows) == 8
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["group_id"], []).append(row)
    assert sorted(len(g) for g in groups.values()) == [2, 2, 2, 2]
    for members in groups.values():  # one task per group, one rollout from each file
        assert len({json.loads(r["metadata"])["example_id"] for r in members}) == 1
        assert sorted(Path(r["source"].split(":")[0]).name for r in members) == ["results-0.jsonl", "results-1.jsonl"]
    # The group id is the key's, whichever file or worker read it: a fixed function of (key, value).
    assert {group_id_of("example_id", str(e)) for e in range(4)} == set(groups)
    # One trajectory = one row here: weight 1, one reward each.
    assert [r["weight"] for r in rows] == [1.0] * 8 and len({r["trajectory_id"] for r in rows}) == 8
    assert report["groups"]["groups"] == 4 and report["groups"]["groups_by_size"] == {"2": 4}
    # Advantages: (r - mean) / (std + eps), std with n - 1 (TRL's nanstd); a group of equal rewards gets 0.
    for members in groups.values():
        rewards = np.array([r["reward"] for r in members])
        expected = (rewards - rewards.mean()) / (rewards.std(ddof=1) + ADVANTAGE_EPS)
        assert np.allclose([r["advantage"] for r in members], expected)
    by_task = {json.loads(r["metadata"])["example_id"]: r["advantage"] for r in rows if r["reward"] == 1.0}
    assert by_task[2] == 0.0 and by_task[0] > 0.7


def test_a_nested_metadata_key_groups_rows(tmp_path: Path) -> None:
    spec = [[(e, a, float(a)) for e in range(2) for a in range(2)]]
    inputs = write_rollouts(tmp_path / "logs", spec)
    lines = [json.loads(line) for line in inputs[0].read_text().splitlines()]
    for line in lines:  # verifiers keeps a task's own fields under info; the schemas there stay out of the rows
        line["info"] = {"task": f"t{line.pop('example_id')}", "oai_tools": [{"type": "function"}]}
    inputs[0].write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, rows, _ = convert(tmp_path / "out", inputs, "--group-by", "info.task", "--group-size", "2")
    assert code == 0 and len(rows) == 4
    assert {r["group_id"] for r in rows} == {group_id_of("info.task", '"t0"'), group_id_of("info.task", '"t1"')}
    assert all(json.loads(r["metadata"])["info"] == {"task": json.loads(r["metadata"])["info"]["task"]} for r in rows)


def test_group_ids_do_not_depend_on_workers_or_file_order(tmp_path: Path) -> None:
    inputs = write_rollouts(tmp_path / "logs", EIGHT)
    _, one, _ = convert(tmp_path / "one", inputs, "--group-by", "example_id")
    _, two, _ = convert(tmp_path / "two", inputs[::-1], "--group-by", "example_id", "--workers", "2")
    assert {r["sample_id"]: r["group_id"] for r in one} == {r["sample_id"]: r["group_id"] for r in two}


def test_group_size_splits_large_groups_and_drops_the_rest_counted(tmp_path: Path) -> None:
    # Task 0: five rollouts (two groups of two, one left over); task 1: one rollout (too small); task 2: none keyed.
    spec = [[(0, a, float(a % 2)) for a in range(5)] + [(1, 0, 1.0)]]
    inputs = write_rollouts(tmp_path / "logs", spec)
    keyless = rollout(2, 0, 1.0)
    del keyless["example_id"]
    with inputs[0].open("a") as f:
        f.write(json.dumps(keyless) + "\n")
    code, rows, report = convert(tmp_path / "out", inputs, "--group-by", "example_id", "--group-size", "2")
    assert code == 0
    assert sorted(Counter(r["group_id"] for r in rows).values()) == [2, 2]
    assert {r["group_id"] for r in rows} == {group_id_of("example_id", "0"), group_id_of("example_id", "0", 1)}
    g = report["groups"]
    assert g["trajectories"] == 7 and g["trajectories_kept"] == 4
    assert g["trajectories_dropped_by_reason"] == {"group_incomplete": 2, "group_key_missing": 1}
    assert g["rows_dropped_by_reason"] == {"group_incomplete": 2, "group_key_missing": 1}
    assert report["turns"]["dropped_by_reason"] == {"group_incomplete": 4, "group_key_missing": 2}
    # Nothing silently lost: the dropped rows are listed, and the turn books balance (checked by the run itself).
    drops = [json.loads(line) for line in (tmp_path / "out" / "drops.jsonl").read_text().splitlines()]
    assert Counter(d["reason"] for d in drops) == {"group_incomplete": 2, "group_key_missing": 1}
    assert report["turns"]["found"] == report["turns"]["trained"] + report["turns"]["dropped"]


def test_a_trajectory_cut_into_k_rows_weighs_one_over_k_on_each(tmp_path: Path) -> None:
    inputs = write_rollouts(tmp_path / "logs", EIGHT)
    # The demo template keeps history, so each rollout is one row; --overflow split cuts long ones into pieces.
    code, rows, _ = convert(
        tmp_path / "out", inputs, "--group-by", "example_id", "--max-length", "120", "--overflow", "split"
    )
    assert code == 0
    per_trajectory = Counter(r["trajectory_id"] for r in rows)
    assert max(per_trajectory.values()) > 1  # some were cut
    for tid, k in per_trajectory.items():
        weights = [r["weight"] for r in rows if r["trajectory_id"] == tid]
        assert weights == [pytest.approx(1 / k)] * k
    assert sum(r["weight"] for r in rows) == pytest.approx(8)


def test_group_options_need_the_rl_target_and_a_key(tmp_path: Path) -> None:
    inputs = write_rollouts(tmp_path / "logs", EIGHT[:1])
    assert main(["convert", str(inputs[0]), "-o", str(tmp_path / "a"), "--group-by", "example_id"]) != 0
    assert main(["convert", str(inputs[0]), "-o", str(tmp_path / "b"), "--target", "rl", "--group-size", "2"]) != 0
    assert main(["convert", str(inputs[0]), "-o", str(tmp_path / "c"), "--target", "rl", "--group-by", "a..b"]) != 0


def test_prompt_key_groups_rows_whose_prompt_tokens_are_equal() -> None:
    samples = fixed_samples(6)
    table = samples_to_table(samples)
    planner = GroupPlanner("@prompt", None)
    planner.observe(table)
    plan = planner.plan()
    kept, dropped, _ = plan.apply(table)
    assert dropped.num_rows == 0
    prompts = [tuple(s.input_ids[: s.turn_spans[0][0]].tolist()) for s in samples]
    same = {(p, g) for p, g in zip(prompts, kept["group_id"].to_pylist(), strict=True)}
    assert len(same) == len(set(prompts)) == len({g for _, g in same})


def test_rows_converted_without_a_plan_weigh_one_over_their_trajectorys_rows() -> None:
    samples = fixed_samples(4)
    for s in samples:
        s.graph_id = "g0" if s is not samples[-1] else "g1"
    rows = to_rl(samples_to_table(samples)).to_pylist()
    assert [r["weight"] for r in rows] == [pytest.approx(1 / 3)] * 3 + [1.0]
    assert all(r["advantage"] is None for r in rows)
    assert pa.Table.from_pylist(rows).num_rows == 4


# --- TRL's GRPO rollout_func path ---------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated:FutureWarning")
@pytest.mark.filterwarnings("ignore:You are using 'rollout_func':UserWarning")
def test_trl_grpo_takes_a_step_on_logged_groups_through_rollout_func(tmp_path: Path) -> None:
    trl = pytest.importorskip("trl", reason="TRL not installed (pip install 'msgtrain[trainers]')")
    import datasets

    from msgtrain.linearize import load_tokenizer
    from msgtrain.trainers.rl import LoggedRollouts, logged_reward

    inputs = write_rollouts(tmp_path / "logs", EIGHT)
    code, _, _ = convert(tmp_path / "out", inputs, "--group-by", "example_id", "--group-size", "2")
    assert code == 0
    rows = datasets.load_dataset(
        "parquet", data_files=str(tmp_path / "out/data/train-*.parquet"), split="train", cache_dir=str(tmp_path / "c")
    )
    rollouts = LoggedRollouts(rows, num_generations=2)
    calls: list[dict[str, Any]] = []

    def recorded(prompts: list[str], trainer: Any) -> dict[str, Any]:
        out = rollouts(prompts, trainer)
        calls.append({"prompts": list(prompts), **out})
        return out

    tokenizer = load_tokenizer(None).hf  # the demo tokenizer the rows were converted with
    model = tiny_llama(len(tokenizer), max_positions=512)
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "trainer"),
        report_to=[],
        per_device_train_batch_size=8,
        num_generations=2,
        max_steps=1,
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        beta=0.0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        trainer = trl.GRPOTrainer(
            model=model,
            reward_funcs=logged_reward,
            args=args,
            train_dataset=rollouts.dataset(),
            processing_class=tokenizer,
            rollout_func=recorded,
        )
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    assert any(not np.allclose(a.numpy(), p.detach().numpy()) for a, p in zip(before, model.parameters(), strict=True))
    (call,) = calls
    # Every group came whole: each prompt (a group id) twice, its two logged rows, their rewards.
    assert Counter(call["prompts"]) == dict.fromkeys(rollouts.groups, 2)
    by_group = {g: sorted(r["reward"] for r in members) for g, members in rollouts.groups.items()}
    got: dict[str, list[float]] = {}
    for prompt, reward in zip(call["prompts"], call["logged_reward"], strict=True):
        got.setdefault(prompt, []).append(reward)
    assert {g: sorted(v) for g, v in got.items()} == by_group
    # Token-exact: prompt + completion are the logged ids; env_mask is the loss mask after the prompt.
    logged = {tuple(r["input_ids"]): r for r in rows.to_list()}
    for p, c, m in zip(call["prompt_ids"], call["completion_ids"], call["env_mask"], strict=True):
        row = logged[tuple(p + c)]
        assert len(p) == row["prompt_length"] and m == row["loss_mask"][len(p) :]
        assert 0 in m  # the tool output inside the completion is context, not trained


# --- tinker and verl views ----------------------------------------------------------------------------------


def _converted(tmp_path: Path) -> list[dict[str, Any]]:
    inputs = write_rollouts(tmp_path / "logs", EIGHT)
    code, rows, _ = convert(tmp_path / "out", inputs, "--group-by", "example_id")
    assert code == 0
    return rows


def test_tinker_datum_fields_follow_the_cookbooks_shift(tmp_path: Path) -> None:
    """Against tinker-cookbook's ``trajectory_to_data`` (tinker_cookbook/rl/data_processing.py at 11885f5): the model
    input is tokens[:-1]; target_tokens, logprobs, advantages and mask are the per-token lists of the whole sequence
    with their first entry dropped; advantages and mask are 0 on observation (not sampled) tokens."""
    from msgtrain.trainers.rl import tinker_datum_fields

    for row in _converted(tmp_path):
        fields = tinker_datum_fields(row)
        ids, inputs = row["input_ids"], fields["loss_fn_inputs"]
        assert fields["model_input"] == ids[:-1] and inputs["target_tokens"] == ids[1:]
        assert {len(v) for v in inputs.values()} == {len(ids) - 1}
        assert inputs["mask"] == [float(m) for m in row["loss_mask"][1:]]
        assert inputs["advantages"] == [row["advantage"] * m for m in inputs["mask"]]
        # the sampled targets are exactly the trained tokens of the row
        trained = [t for t, m in zip(ids, row["loss_mask"], strict=True) if m]
        assert [t for t, m in zip(inputs["target_tokens"], inputs["mask"], strict=True) if m] == trained


def test_tinker_builds_its_datum_from_a_row(tmp_path: Path) -> None:
    pytest.importorskip("tinker", reason="tinker not installed (pip install tinker)")
    from msgtrain.trainers.rl import tinker_datum

    row = _converted(tmp_path)[0]
    datum = tinker_datum(row)
    assert datum.model_input.to_ints() == row["input_ids"][:-1]


def test_verl_batch_holds_each_row_in_its_prompt_and_response_layout(tmp_path: Path) -> None:
    """verl's layout (verl/workers/actor/dp_actor.py ``update_policy`` reads responses, response_mask, input_ids,
    attention_mask, position_ids; its agent loop documents prompts / responses / response_mask / input_ids /
    attention_mask / position_ids): prompts left-padded, responses right-padded, input_ids their concatenation."""
    torch = pytest.importorskip("torch")
    from msgtrain.trainers.rl import verl_batch

    rows = _converted(tmp_path)
    batch = verl_batch(rows, pad_token_id=0)
    p_len = batch["prompts"].shape[1]
    assert torch.equal(batch["input_ids"], torch.cat([batch["prompts"], batch["responses"]], dim=1))
    for i, row in enumerate(rows):
        real = batch["attention_mask"][i].bool()
        assert batch["input_ids"][i][real].tolist() == row["input_ids"]  # the row, token for token
        assert batch["position_ids"][i][real].tolist() == list(range(len(row["input_ids"])))
        k = len(row["input_ids"]) - row["prompt_length"]
        assert batch["response_mask"][i, :k].tolist() == row["loss_mask"][row["prompt_length"] :]
        assert batch["response_mask"][i, k:].sum() == 0 and real[:p_len].sum() == row["prompt_length"]
        assert batch["token_level_scores"][i].sum().item() == row["reward"]
        assert batch["token_level_scores"][i, k - 1].item() == row["reward"]
    try:
        from verl import DataProto
    except ImportError:
        return
    assert len(DataProto.from_dict(tensors=batch)) == len(rows)


# OpenRLHF's Experience fields (openrlhf/trainer/ppo_utils/experience.py at db825a2): step tensors over the whole
# sequence (sequences, attention_mask) or over the action (response) tokens (action_mask, *_log_probs, values,
# returns, advantages, kl); episode scalars (rewards, scores, response_length, truncated, total_length).
OPENRLHF_STEP_T = {"sequences", "attention_mask"}
OPENRLHF_STEP_A = {"action_mask", "action_log_probs", "base_action_log_probs", "rollout_log_probs", "values"}
OPENRLHF_EPISODE = {"rewards", "scores", "response_length", "truncated", "total_length"}


def test_openrlhf_experience_fields_hold_the_row_in_its_action_layout(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from msgtrain.trainers.rl import openrlhf_experience_fields

    for row in _converted(tmp_path):
        fields = openrlhf_experience_fields(row)
        assert set(fields) <= OPENRLHF_STEP_T | OPENRLHF_STEP_A | OPENRLHF_EPISODE
        t = len(row["input_ids"])
        a = t - row["prompt_length"]
        assert all(fields[k].shape == (t,) for k in OPENRLHF_STEP_T & set(fields))
        assert all(fields[k].shape == (a,) for k in OPENRLHF_STEP_A & set(fields))
        assert all(fields[k].dim() == 0 for k in OPENRLHF_EPISODE & set(fields))
        # the action tokens are the last A of the sequence; the sampled ones are exactly the trained tokens
        actions = fields["sequences"][-a:][fields["action_mask"]].tolist()
        assert actions == [tok for tok, m in zip(row["input_ids"], row["loss_mask"], strict=True) if m]
        assert fields["rewards"].item() == row["reward"]
    try:
        from openrlhf.trainer.ppo_utils.experience import Experience, make_experience_batch
    except ImportError:
        return
    rows = _converted(tmp_path / "again")
    batch = make_experience_batch([Experience(**openrlhf_experience_fields(r)) for r in rows])
    assert batch.sequences.shape[0] == len(rows)
