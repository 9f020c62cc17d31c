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

Invariant (tested with a random Qwen2 model on CPU): per-token logprobs of trained tokens from tree rows equal
those from canonical rows, and so do the summed loss and its gradient.
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
    padding with ``subtree_end == 0`` so padded keys are never seen)."""
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


def tree_loss(
    model: Any, batch: dict[str, torch.Tensor], weights: torch.Tensor | None = None, attention: str = "bool"
) -> torch.Tensor:
    """Negative log-likelihood of the trained tokens of a collated batch (``weights`` from
    :func:`loss_weights`, default: mean over trained tokens).

    Hugging Face causal LMs (e.g. Qwen2/Qwen3, transformers >= 4.53) take a 4D mask as is: pass a boolean
    mask for ``sdpa`` / ``flex``-free paths, or ``attention="float"`` for the additive 0/-inf form."""
    mask = batch["attention_mask"]
    if attention == "float":
        mask = additive_mask(mask)
    out = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], attention_mask=mask)
    lp = token_logprobs(out.logits, batch["input_ids"], batch["parent_index"])
    trained = batch["loss_mask"].bool()
    if weights is None:
        return -(lp * trained).sum() / trained.sum().clamp(min=1)
    return -(lp * weights).sum()
