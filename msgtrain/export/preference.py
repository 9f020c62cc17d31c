"""Preference targets: ``dpo`` (pairs) and ``kto`` (judged replies), in the layout TRL's trainers load with defaults.

What a row is judged by (the canonical ``flags``, set where the log judges a reply, :mod:`msgtrain.linearize.plan`):
``preference_chosen`` / ``label_positive`` is desirable, ``preference_rejected`` / ``label_negative`` undesirable
(these targets train the undesirable side: ``train_negative`` is on by default for them). The judged reply is a
row's last trained turn (``turn_spans[-1]``); the prompt is every token before it (earlier trained turns included,
as context), so two rows are replies to one prompt exactly when those tokens are equal.

- ``dpo``: one row per pair of replies to the same prompt tokens: each undesirable reply with the first desirable one
  (a preference record's two sides; a ranked or labelled set's worse replies each with a best one); replies without a
  judgement but with a reward (scored siblings, RL rollouts of one prompt) give one pair per prompt, the highest reward
  chosen, the lowest rejected, when they differ. Pairs never cross a split.
- ``kto``: one row per judged reply, ``label`` true for desirable.

Layout (TRL 1.16 ``DPOTrainer`` / ``KTOTrainer``, ``_prepare_dataset``): both always tokenize the text columns
``prompt`` + ``chosen`` / ``rejected`` (``completion`` + ``label`` for KTO; KTO builds its own ``KL_completion_ids``),
appending ``eos_token`` to a completion that does not end with it, and take the completion from where the tokenized
prompt and prompt + completion diverge. So the text columns are the decoded tokens, and a row is written only when that
tokenization gives back exactly its ids: the token-exact ids (``prompt_ids``, ``chosen_ids``, ``rejected_ids`` /
``completion_ids``, TRL's own column names) are what TRL trains with its defaults; a pair or reply whose text does not
tokenize back is left out and counted (``not_retokenizable``). The text also reads as OpenRLHF's preference and KTO
datasets (``--prompt_key prompt --chosen_key chosen --rejected_key rejected`` / ``--label_key label``, no chat
template applied: the text holds the rendered template).

Memory: ``dpo`` holds, per prompt, the first desirable reply, the undesirable ones still waiting for one, and the
best and worst scored reply, until the split ends.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from msgtrain.errors import ConfigError
from msgtrain.export import arrays

GOOD = frozenset({"preference_chosen", "label_positive"})
BAD = frozenset({"preference_rejected", "label_negative"})
NOT_RETOKENIZABLE = "not_retokenizable"

_IDS = pa.list_(pa.int32())
DPO_SCHEMA = pa.schema(
    [
        ("prompt", pa.string()),
        ("chosen", pa.string()),
        ("rejected", pa.string()),
        ("prompt_ids", _IDS),
        ("chosen_ids", _IDS),
        ("rejected_ids", _IDS),
        ("chosen_sample_id", pa.string()),
        ("rejected_sample_id", pa.string()),
        ("chosen_reward", pa.float64()),
        ("rejected_reward", pa.float64()),
        ("paired_by", pa.string()),  # "judgement" (marks) | "reward" (scored siblings)
    ]
)
KTO_SCHEMA = pa.schema(
    [
        ("prompt", pa.string()),
        ("completion", pa.string()),
        ("label", pa.bool_()),
        ("prompt_ids", _IDS),
        ("completion_ids", _IDS),
        ("sample_id", pa.string()),
        ("reward", pa.float64()),
    ]
)


class TrlText:
    """Text for ids such that TRL's tokenization of it (``tokenizer(text=...)``, EOS appended to a completion that
    lacks it, completion = where prompt and prompt + completion diverge) gives back exactly those ids."""

    def __init__(self, tokenizer: Any) -> None:
        hf = getattr(tokenizer, "hf", tokenizer)
        if hf is not None and not callable(hf) and hasattr(type(hf), "transformers_tokenizer"):
            hf = hf.transformers_tokenizer()  # a tokenizer restored from its snapshot: transformers' own object
        if hf is None or not callable(hf):
            raise ConfigError(
                "the dpo and kto targets need a Hugging Face tokenizer (TRL tokenizes their text with it)",
                hint="pass --tokenizer with a tokenizer folder or hub id that transformers loads",
                code="preference_needs_hf_tokenizer",
            )
        self.hf = hf
        self.added = list(hf(text="")["input_ids"])  # what the tokenizer adds around any text (a BOS)
        self.eos = hf.eos_token

    def _ids(self, text: str) -> list[int]:
        return list(self.hf(text=text)["input_ids"])

    def texts(self, prompt: list[int], completion: list[int]) -> tuple[str, str] | None:
        """(prompt text, completion text), or None when TRL would tokenize them into other ids."""
        if prompt[: len(self.added)] != self.added:
            return None
        prompt_text = self.hf.decode(prompt[len(self.added) :])
        completion_text = self.hf.decode(completion)
        as_trl = (
            completion_text if self.eos is None or completion_text.endswith(self.eos) else completion_text + self.eos
        )
        alone, whole = self._ids(prompt_text), self._ids(prompt_text + as_trl)
        cut = 0
        while cut < min(len(alone), len(whole)) and alone[cut] == whole[cut]:
            cut += 1
        if alone[:cut] != prompt or whole[cut:] != completion:
            return None
        return prompt_text, completion_text


@dataclass
class _Reply:
    prompt: list[int]
    completion: list[int]
    sample_id: str
    reward: float | None


def _replies(table: pa.Table) -> list[tuple[str, str | None, _Reply]]:
    """Per row: (prompt key, judgement "good" | "bad" | None, the reply)."""
    offsets = arrays.offsets_of(table["input_ids"])
    ids = arrays.flat_values(table["input_ids"], np.int32)
    out = []
    rows = table.select(["turn_spans", "flags", "sample_id", "reward"]).to_pylist()
    for i, row in enumerate(rows):
        if not row["turn_spans"]:
            continue
        span = row["turn_spans"][-1]
        base = int(offsets[i])
        prompt = ids[base : base + span["start"]]
        flags = set(row["flags"])
        judged = "good" if flags & GOOD else "bad" if flags & BAD else None
        key = hashlib.blake2b(prompt.tobytes(), digest_size=16).hexdigest()
        reply = _Reply(
            prompt.tolist(), ids[base + span["start"] : base + span["end"]].tolist(), row["sample_id"], row["reward"]
        )
        out.append((key, judged, reply))
    return out


class DpoConverter:
    """Pairs replies to equal prompt tokens (module docstring); one converter per split."""

    def __init__(self, tokenizer: Any) -> None:
        self.text = TrlText(tokenizer)
        self.first_good: dict[str, _Reply] = {}
        self.waiting: dict[str, list[_Reply]] = {}
        self.scored: dict[str, tuple[_Reply, _Reply]] = {}  # (best, worst) by reward
        self.counts: Counter[str] = Counter()

    def convert(self, table: pa.Table) -> pa.Table:
        rows: list[dict[str, Any]] = []
        for key, judged, reply in _replies(table):
            if judged == "good":
                self.first_good.setdefault(key, reply)
                for bad in self.waiting.pop(key, []):
                    self._pair(rows, self.first_good[key], bad, "judgement")
            elif judged == "bad":
                if key in self.first_good:
                    self._pair(rows, self.first_good[key], reply, "judgement")
                else:
                    self.waiting.setdefault(key, []).append(reply)
            elif reply.reward is not None:
                best, worst = self.scored.get(key, (reply, reply))
                assert best.reward is not None and worst.reward is not None
                self.scored[key] = (
                    reply if reply.reward > best.reward else best,
                    reply if reply.reward < worst.reward else worst,
                )
            else:
                self.counts["replies_unjudged"] += 1
        return pa.Table.from_pylist(rows, schema=DPO_SCHEMA)

    def _pair(self, rows: list[dict[str, Any]], good: _Reply, bad: _Reply, by: str) -> None:
        chosen, rejected = self.text.texts(good.prompt, good.completion), self.text.texts(bad.prompt, bad.completion)
        if chosen is None or rejected is None:
            self.counts[f"pairs_{NOT_RETOKENIZABLE}"] += 1
            return
        self.counts["pairs"] += 1
        self.counts[f"pairs_by_{by}"] += 1
        rows.append(
            {
                "prompt": chosen[0],
                "chosen": chosen[1],
                "rejected": rejected[1],
                "prompt_ids": good.prompt,
                "chosen_ids": good.completion,
                "rejected_ids": bad.completion,
                "chosen_sample_id": good.sample_id,
                "rejected_sample_id": bad.sample_id,
                "chosen_reward": good.reward,
                "rejected_reward": bad.reward,
                "paired_by": by,
            }
        )

    def flush(self) -> pa.Table:
        rows: list[dict[str, Any]] = []
        for best, worst in self.scored.values():
            if best.reward is not None and worst.reward is not None and best.reward > worst.reward:
                self._pair(rows, best, worst, "reward")
            else:
                self.counts["scored_prompts_without_a_margin"] += 1
        self.counts["rejected_without_chosen"] += sum(map(len, self.waiting.values()))
        self.scored, self.waiting = {}, {}
        return pa.Table.from_pylist(rows, schema=DPO_SCHEMA)

    def stats(self) -> dict[str, Any]:
        return dict(sorted(self.counts.items()))


class KtoConverter:
    """One row per judged reply (module docstring)."""

    def __init__(self, tokenizer: Any) -> None:
        self.text = TrlText(tokenizer)
        self.counts: Counter[str] = Counter()

    def convert(self, table: pa.Table) -> pa.Table:
        rows = []
        for _, judged, reply in _replies(table):
            if judged is None:
                self.counts["replies_unjudged"] += 1
                continue
            texts = self.text.texts(reply.prompt, reply.completion)
            if texts is None:
                self.counts[f"replies_{NOT_RETOKENIZABLE}"] += 1
                continue
            self.counts["desirable" if judged == "good" else "undesirable"] += 1
            rows.append(
                {
                    "prompt": texts[0],
                    "completion": texts[1],
                    "label": judged == "good",
                    "prompt_ids": reply.prompt,
                    "completion_ids": reply.completion,
                    "sample_id": reply.sample_id,
                    "reward": reply.reward,
                }
            )
        return pa.Table.from_pylist(rows, schema=KTO_SCHEMA)

    def flush(self) -> pa.Table:
        return KTO_SCHEMA.empty_table()

    def stats(self) -> dict[str, Any]:
        return dict(sorted(self.counts.items()))


def completion_mask(column: str) -> Any:
    """``train_mask`` of a preference target: every token of ``column`` (the trained reply) is trained."""

    def mask(table: pa.Table) -> pa.Array:
        offsets = arrays.offsets_of(table[column])
        return arrays.build_list(offsets, np.ones(int(offsets[-1]), dtype=np.int8), pa.int8())

    return mask
