"""Logged rollouts (``--target rl`` rows) handed to RL trainers as the rollouts they would have generated.

TRL's GRPO trainer generates its own completions unless given a ``rollout_func(prompts, trainer) -> dict`` (TRL
1.16, ``GRPOTrainer._generate``): it must return ``prompt_ids``, ``completion_ids`` and ``logprobs`` per prompt, may
return ``env_mask`` (1 = a token the policy generated, 0 = a tool's output in the completion) and any other field,
which TRL hands to the reward functions. The trainer's sampler repeats each dataset row ``num_generations`` times in a
row, and normalizes rewards over those ``num_generations`` completions.

:class:`LoggedRollouts` makes that path replay logged groups: its :meth:`~LoggedRollouts.dataset` has one row per
group (the ``prompt`` column holds the ``group_id``), the call returns the group's logged rows in order (the j-th
repeat of a group's prompt gets its j-th row), and :func:`logged_reward` is the reward function that returns each
row's logged reward. Each row becomes one completion: ``prompt_ids = input_ids[:prompt_length]``, the rest is the
completion, ``env_mask = loss_mask[prompt_length:]`` (tool outputs and untrained turns inside it are context, not
trained), ``logprobs`` the logged behaviour logprobs (None → NaN where the log has none: TRL's importance-sampling
correction then leaves those tokens uncorrected).

A group must hold exactly ``num_generations`` rows: convert with ``--group-by KEY --group-size N`` and, where
trajectories are cut into several rows, note that TRL gives each row its own advantage (it has no per-row weight:
the ``weight`` column is for trainers that do; see docs/rl.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from msgtrain.errors import ConfigError

REQUIRED = ("group_id", "input_ids", "loss_mask", "logprobs", "reward", "prompt_length")


def _rows(rows: Any) -> list[dict[str, Any]]:
    if hasattr(rows, "to_list"):  # datasets.Dataset
        return list(rows.to_list())
    if hasattr(rows, "to_pylist"):  # pyarrow.Table
        return list(rows.to_pylist())
    return [dict(r) for r in rows]


class LoggedRollouts:
    """A TRL GRPO ``rollout_func`` that returns logged ``--target rl`` rows instead of generating."""

    def __init__(self, rows: Iterable[Mapping[str, Any]] | Any, num_generations: int) -> None:
        self.num_generations = num_generations
        self.groups: dict[str, list[dict[str, Any]]] = {}
        for row in _rows(rows):
            missing = [k for k in REQUIRED if k not in row]
            if missing:
                raise ConfigError(
                    f"not an rl row: missing {missing}", hint="convert with --target rl", code="not_rl_rows"
                )
            self.groups.setdefault(row["group_id"], []).append(row)
        wrong = {g: len(r) for g, r in self.groups.items() if len(r) != num_generations}
        if wrong:
            shown = ", ".join(f"{g}: {n}" for g, n in list(wrong.items())[:3])
            raise ConfigError(
                f"{len(wrong)} group(s) do not hold num_generations={num_generations} rows ({shown})",
                hint=f"convert with --group-by KEY --group-size {num_generations}, or set num_generations to the "
                "group size",
                code="group_size_mismatch",
            )

    def dataset(self) -> Any:
        """One row per group, ``prompt`` = its group id (what the trainer's sampler repeats)."""
        import datasets

        return datasets.Dataset.from_dict({"prompt": list(self.groups)})

    def __call__(self, prompts: Sequence[str], trainer: Any = None) -> dict[str, list[Any]]:
        seen: dict[str, int] = {}
        out: dict[str, list[Any]] = {
            k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "logged_reward")
        }
        for prompt in prompts:
            members = self.groups.get(prompt)
            if members is None:
                raise ConfigError(f"prompt {prompt!r} is not a logged group id", code="unknown_group")
            j = seen.get(prompt, 0) % len(members)
            seen[prompt] = j + 1
            row = members[j]
            cut = int(row["prompt_length"])
            ids = list(row["input_ids"])
            out["prompt_ids"].append(ids[:cut])
            out["completion_ids"].append(ids[cut:])
            out["env_mask"].append([int(m) for m in row["loss_mask"][cut:]])
            out["logprobs"].append([math.nan if lp is None else float(lp) for lp in row["logprobs"][cut:]])
            out["logged_reward"].append(row["reward"])
        return out


def logged_reward(completions: Sequence[Any], logged_reward: Sequence[float | None], **_: Any) -> list[float | None]:
    """TRL reward function: the reward the log holds for each completion (None: unscored, TRL's NaN)."""
    return [None if r is None else float(r) for r in logged_reward]


# --- tinker: one Datum per row ----------------------------------------------------------------------------------


def tinker_datum_fields(row: Mapping[str, Any], advantage: float | None = None) -> dict[str, Any]:
    """The fields of a ``tinker.Datum`` for one ``--target rl`` row, as tinker-cookbook builds them from a trajectory
    (``tinker_cookbook/rl/data_processing.py``, ``trajectory_to_data``): ``model_input`` = tokens[:-1], and
    ``loss_fn_inputs`` aligned with the targets tokens[1:]: ``target_tokens``, ``logprobs`` (the behaviour logprob of
    each sampled token, 0.0 elsewhere and where the log has none), ``advantages`` (the trajectory's advantage on its
    sampled tokens, 0 elsewhere) and ``mask`` (1.0 on sampled tokens = ``loss_mask``). ``advantage`` defaults to the
    row's ``advantage`` column (0 where null); the cookbook's own is the group-centred reward ``r - mean(r)``."""
    ids = [int(t) for t in row["input_ids"]]
    mask = [float(m) for m in row["loss_mask"]]
    adv = float(advantage if advantage is not None else (row.get("advantage") or 0.0))
    logprobs = [0.0 if lp is None else float(lp) for lp in row["logprobs"]]
    return {
        "model_input": ids[:-1],
        "loss_fn_inputs": {
            "target_tokens": ids[1:],
            "logprobs": logprobs[1:],
            "advantages": [adv * m for m in mask[1:]],
            "mask": mask[1:],
        },
    }


def tinker_datum(row: Mapping[str, Any], advantage: float | None = None) -> Any:
    """A ``tinker.Datum`` for one row (needs the ``tinker`` package): :func:`tinker_datum_fields`, wrapped."""
    import tinker
    import torch

    fields = tinker_datum_fields(row, advantage)
    dtypes = {"target_tokens": torch.int64}
    return tinker.Datum(
        model_input=tinker.ModelInput.from_ints(tokens=fields["model_input"]),
        loss_fn_inputs={
            key: tinker.TensorData.from_torch(torch.tensor(value, dtype=dtypes.get(key, torch.float32)))
            for key, value in fields["loss_fn_inputs"].items()
        },
    )


# --- verl: the batch its actor updates from ---------------------------------------------------------------------


def verl_batch(rows: Sequence[Mapping[str, Any]], pad_token_id: int) -> dict[str, Any]:
    """The tensors of a verl ``DataProto`` batch for ``--target rl`` rows (needs torch), in verl's layout (its agent
    loop's output and ``dp_actor.update_policy``'s keys): ``prompts`` left-padded, ``responses`` right-padded,
    ``input_ids`` = prompts ‖ responses, ``attention_mask``, ``position_ids`` (positions of the real tokens, counted
    from the first), ``response_mask`` (1 on sampled tokens: tool outputs inside a response are 0),
    ``rollout_log_probs`` (the behaviour logprobs, 0 where unknown), and ``token_level_scores`` (the row's reward on
    its last response token, as verl's reward managers place it). The prompt is ``input_ids[:prompt_length]``."""
    import torch

    prompts = [list(r["input_ids"][: r["prompt_length"]]) for r in rows]
    responses = [list(r["input_ids"][r["prompt_length"] :]) for r in rows]
    p_len = max((len(p) for p in prompts), default=0)
    r_len = max(max((len(x) for x in responses), default=0), 1)
    n = len(rows)
    out = {
        "prompts": torch.full((n, p_len), pad_token_id, dtype=torch.long),
        "responses": torch.full((n, r_len), pad_token_id, dtype=torch.long),
        "response_mask": torch.zeros((n, r_len), dtype=torch.long),
        "rollout_log_probs": torch.zeros((n, r_len), dtype=torch.float32),
        "token_level_scores": torch.zeros((n, r_len), dtype=torch.float32),
    }
    attention = torch.zeros((n, p_len + r_len), dtype=torch.long)
    for i, (row, prompt, response) in enumerate(zip(rows, prompts, responses, strict=True)):
        cut = int(row["prompt_length"])
        if prompt:
            out["prompts"][i, p_len - len(prompt) :] = torch.tensor(prompt)
        k = len(response)
        if k:
            out["responses"][i, :k] = torch.tensor(response)
            out["response_mask"][i, :k] = torch.tensor([int(m) for m in row["loss_mask"][cut:]])
            out["rollout_log_probs"][i, :k] = torch.tensor([0.0 if lp is None else lp for lp in row["logprobs"][cut:]])
            out["token_level_scores"][i, k - 1] = float(row["reward"] or 0.0)
        attention[i, p_len - len(prompt) : p_len + k] = 1
    out["input_ids"] = torch.cat([out["prompts"], out["responses"]], dim=1)
    out["attention_mask"] = attention
    out["position_ids"] = torch.clamp(torch.cumsum(attention, dim=1) - 1, min=0)
    return out


# --- OpenRLHF: one single-sample Experience per row --------------------------------------------------------------


def openrlhf_experience_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """The tensor fields of one single-sample OpenRLHF ``Experience`` (``openrlhf/trainer/ppo_utils/experience.py``)
    for an ``--target rl`` row (needs torch): ``sequences`` = prompt ‖ response (T), ``attention_mask`` (T),
    ``action_mask`` over the response's A = T - ``prompt_length`` tokens (True on sampled tokens: tool outputs inside
    the response are False), ``rollout_log_probs`` (A; 0 where the log has none), and the episode scalars
    ``rewards``, ``response_length``, ``total_length``. ``make_experience_batch`` pads a list of them."""
    import torch

    ids = [int(t) for t in row["input_ids"]]
    cut = int(row["prompt_length"])
    return {
        "sequences": torch.tensor(ids, dtype=torch.long),
        "attention_mask": torch.ones(len(ids), dtype=torch.long),
        "action_mask": torch.tensor([bool(m) for m in row["loss_mask"][cut:]], dtype=torch.bool),
        "rollout_log_probs": torch.tensor(
            [0.0 if lp is None else float(lp) for lp in row["logprobs"][cut:]], dtype=torch.float32
        ),
        "rewards": torch.tensor(float(row["reward"] or 0.0)),
        "response_length": torch.tensor(float(sum(int(m) for m in row["loss_mask"][cut:]))),
        "total_length": torch.tensor(float(len(ids))),
    }
