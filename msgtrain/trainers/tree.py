"""Training on ``--target tree`` rows with PyTorch: attention mask, collate, loss (needs torch only).

A tree row is a depth-first serialization of a prefix tree (see :mod:`msgtrain.export.tree`). Three things make
a forward pass over it equal to forwarding every flat sample on its own:

1. ``position_ids``: each token keeps the position it had in its flat sample (passed to the model as is).
2. The attention mask: query ``q`` sees key ``k`` iff ``k <= q < subtree_end[k]`` (k lies on q's root path).
   :func:`dense_mask` builds it as a boolean ``[batch, 1, len, len]`` tensor (eager / SDPA); :func:`block_mask`
   as a FlexAttention ``BlockMask`` without materialising the dense matrix.
3. The loss: the logits that predict token ``i`` sit at ``parent_index[i]`` (the previous token on its root
   path), not at ``i - 1``. :func:`token_logprobs` gathers them; a trained token has ``loss_mask == 1``.

Loss normalisation (:func:`loss_weights`) reproduces the canonical objective exactly: every trained token of
the canonical rows is trained once in the tree rows, so

- ``"token"``: the sum of token losses divided by the number of trained tokens (TRL / HF default, per batch);
- ``"sample"``: each token weighted by ``1 / trained tokens of its canonical sample`` (mean per sample), using
  ``turn_index`` → ``turn_sample_ids`` and the per-sample trained counts the row carries;
- ``"turn"``: each token weighted by ``1 / tokens of its turn``;
- ``"sum"``: weight 1 (summed loss).

Invariant (tested with random Qwen2 and Qwen3 models on CPU, on sample_logs and on a seeded choice of graphs of
every real-log folder): per-token logprobs of trained tokens from tree rows equal those from canonical rows, and so
do the summed loss and its gradient (dense mask, SDPA and eager); logprobs also through FlexAttention.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch

Normalization = Literal["token", "sample", "turn", "sum"]
IGNORE_INDEX = -100


def dense_mask(subtree_end: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Boolean ``[batch, 1, L, L]`` mask (True = may attend) from ``subtree_end`` ``[batch, L]``.

    Padding (positions ``>= lengths``) sees only itself, so no row of the softmax is empty."""
    _batch, length = subtree_end.shape
    q = torch.arange(length, device=subtree_end.device).view(1, length, 1)
    k = torch.arange(length, device=subtree_end.device).view(1, 1, length)
    mask = (k <= q) & (q < subtree_end.unsqueeze(1))
    if lengths is not None:
        pad = torch.arange(length, device=subtree_end.device).unsqueeze(0) >= lengths.unsqueeze(1)
        mask = mask & ~pad.unsqueeze(1) & ~pad.unsqueeze(2)
        mask = mask | (torch.eye(length, dtype=torch.bool, device=subtree_end.device) & pad.unsqueeze(2))
    return mask.unsqueeze(1)


def additive_mask(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The 0 / -inf float form of a boolean mask (what eager attention adds to its scores)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


def block_mask(subtree_end: torch.Tensor, block_size: int = 128) -> Any:
    """A FlexAttention ``BlockMask`` for rows ``[batch, L]`` (L a multiple of ``block_size`` after padding,
    padding with ``subtree_end == 0`` so padded keys are never seen; a padded query sees nothing and FlexAttention
    returns 0 for it).

    Hugging Face models with ``attn_implementation="flex_attention"`` take it as ``attention_mask`` as is
    (:func:`tree_logprobs`). Tested on CPU (torch 2.13, uncompiled, forward only: FlexAttention has no backward
    on CPU); training through it needs a CUDA device, where transformers compiles the kernel."""
    from torch.nn.attention.flex_attention import create_block_mask

    ends = subtree_end

    def tree(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return (kv_idx <= q_idx) & (q_idx < ends[b, kv_idx])

    batch, length = subtree_end.shape
    return create_block_mask(
        tree, B=batch, H=None, Q_LEN=length, KV_LEN=length, device=str(subtree_end.device), BLOCK_SIZE=block_size
    )


def collate(rows: Sequence[dict[str, Any]], pad_id: int = 0, multiple_of: int = 1) -> dict[str, torch.Tensor]:
    """Pad tree rows (dicts as ``datasets`` yields them) into a batch.

    Returns ``input_ids``, ``position_ids``, ``parent_index``, ``subtree_end`` (0 on padding), ``loss_mask``,
    ``lengths`` and a boolean ``attention_mask`` ``[B, 1, L, L]``; ``weights`` per token for every
    normalisation is left to :func:`loss_weights`."""
    lengths = [len(r["input_ids"]) for r in rows]
    length = max(lengths) if lengths else 0
    length = -(-length // multiple_of) * multiple_of
    batch = len(rows)

    def pad(name: str, value: int, dtype: torch.dtype) -> torch.Tensor:
        out = torch.full((batch, length), value, dtype=dtype)
        for i, r in enumerate(rows):
            out[i, : lengths[i]] = torch.tensor(r[name], dtype=dtype)
        return out

    subtree_end = pad("subtree_end", 0, torch.long)
    lengths_t = torch.tensor(lengths, dtype=torch.long)
    return {
        "input_ids": pad("input_ids", pad_id, torch.long),
        "position_ids": pad("position_ids", 0, torch.long),
        "parent_index": pad("parent_index", -1, torch.long),
        "subtree_end": subtree_end,
        "loss_mask": pad("loss_mask", 0, torch.long),
        "turn_index": pad("turn_index", -1, torch.long),
        "lengths": lengths_t,
        "attention_mask": dense_mask(subtree_end, lengths_t),
    }


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, parent_index: torch.Tensor) -> torch.Tensor:
    """Log-probability of each token under the logits at its parent position, ``[B, L]`` (0 at roots).

    Compute in float32: ``log_softmax`` of the gathered parent logits."""
    safe_parent = parent_index.clamp(min=0)
    parent_logits = torch.gather(logits, 1, safe_parent.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
    lp = torch.log_softmax(parent_logits.float(), dim=-1).gather(-1, input_ids.unsqueeze(-1)).squeeze(-1)
    return torch.where(parent_index >= 0, lp, torch.zeros_like(lp))


def loss_weights(rows: Sequence[dict[str, Any]], length: int, normalization: Normalization = "token") -> torch.Tensor:
    """Per-token loss weights ``[B, L]`` giving the canonical objective (see the module docstring).

    ``"token"`` divides by the trained tokens of the whole batch, as a canonical batch holding the same samples
    would; ``"sample"`` needs each turn's sample to be whole in the batch's rows, which holds when a tree was not
    cut into several rows (pass the whole dataset's counts through ``sample_trained`` otherwise)."""
    weights = torch.zeros(len(rows), length)
    trained_total = sum(int(sum(r["loss_mask"])) for r in rows)
    per_sample: dict[str, int] = {}
    per_turn: list[list[int]] = []
    for r in rows:
        counts = [0] * len(r["turn_ids"])
        for t in r["turn_index"]:
            if t >= 0:
                counts[t] += 1
        per_turn.append(counts)
        for t, sid in enumerate(r["turn_sample_ids"]):
            per_sample[sid] = per_sample.get(sid, 0) + counts[t]
    for i, r in enumerate(rows):
        turn = torch.tensor(r["turn_index"], dtype=torch.long)
        trained = turn >= 0
        if normalization == "sum":
            w = trained.float()
        elif normalization == "token":
            w = trained.float() / max(trained_total, 1)
        elif normalization == "turn":
            sizes = torch.tensor(per_turn[i] or [1], dtype=torch.float32)
            w = torch.where(trained, 1.0 / sizes[turn.clamp(min=0)], torch.zeros(()))
        else:
            n_samples = len(per_sample)
            sizes = torch.tensor([per_sample[s] for s in r["turn_sample_ids"]] or [1], dtype=torch.float32)
            w = torch.where(trained, 1.0 / (sizes[turn.clamp(min=0)] * n_samples), torch.zeros(()))
        weights[i, : len(r["turn_index"])] = w
    return weights


def model_mask(model: Any, mask: torch.Tensor) -> torch.Tensor:
    """The 4D mask in the form ``model``'s attention takes.

    Hugging Face causal LMs (Qwen2/Qwen3 in transformers >= 4.53, checked on 5.x) return a 4D
    ``attention_mask`` from mask creation as is. ``sdpa`` passes it to ``scaled_dot_product_attention``, which
    takes a boolean mask (True = attend); ``eager`` *adds* the mask to the scores, so it needs the 0/-inf float
    form (a boolean mask would add 0/1 and attend everywhere)."""
    config = getattr(model, "config", None)
    implementation = getattr(config, "_attn_implementation", None)
    return additive_mask(mask, _float_dtype(model)) if implementation == "eager" else mask


def _float_dtype(model: Any) -> torch.dtype:
    try:
        return next(p.dtype for p in model.parameters() if p.is_floating_point())
    except (StopIteration, AttributeError):
        return torch.float32


def tree_logprobs(model: Any, batch: dict[str, torch.Tensor], attention_mask: Any = None) -> torch.Tensor:
    """Forward a collated batch; the log-probability of every token given its root path, ``[B, L]``.

    ``attention_mask`` replaces the batch's dense mask, e.g. ``block_mask(batch["subtree_end"])`` for a model
    loaded with ``attn_implementation="flex_attention"`` (collate with ``multiple_of`` = the block size)."""
    mask = attention_mask if attention_mask is not None else model_mask(model, batch["attention_mask"])
    out = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], attention_mask=mask)
    return token_logprobs(out.logits, batch["input_ids"], batch["parent_index"])


def weighted_nll(logprobs: torch.Tensor, loss_mask: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """``-sum(weights * logprobs)`` over trained tokens (``weights`` from :func:`loss_weights`; default: the
    mean over the batch's trained tokens)."""
    trained = loss_mask.bool()
    if weights is None:
        return -(logprobs * trained).sum() / trained.sum().clamp(min=1)
    return -(logprobs * weights * trained).sum()


def tree_loss(model: Any, batch: dict[str, torch.Tensor], weights: torch.Tensor | None = None) -> torch.Tensor:
    """Negative log-likelihood of the trained tokens of a collated batch (see :func:`weighted_nll`)."""
    return weighted_nll(tree_logprobs(model, batch), batch["loss_mask"], weights)


class TreeCollator:
    """``data_collator`` for Hugging Face / TRL trainers: tree rows in, :func:`collate` batches out."""

    def __init__(self, pad_id: int = 0, multiple_of: int = 1) -> None:
        self.pad_id, self.multiple_of = pad_id, multiple_of

    def __call__(self, features: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        return collate(features, self.pad_id, self.multiple_of)


def trainer_loss(
    model: Any, inputs: dict[str, torch.Tensor], return_outputs: bool = False, num_items_in_batch: Any = None
) -> Any:
    """Body of a ``compute_loss`` override for ``transformers.Trainer`` / ``trl.SFTTrainer`` on tree batches.

    The mean over the batch's trained tokens; with ``num_items_in_batch`` (the trainer's count across gradient
    accumulation steps, which it derives from a ``labels`` key, so only when the caller supplies it) the sum over
    that count instead, as the trainers do for canonical rows."""
    lp = tree_logprobs(model, inputs)
    trained = inputs["loss_mask"].bool()
    total = -(lp * trained).sum()
    loss = total / (num_items_in_batch if num_items_in_batch is not None else trained.sum().clamp(min=1))
    return (loss, {"logprobs": lp}) if return_outputs else loss
