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
from typing import Any, Literal, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

Normalization = Literal["token", "sample", "turn", "sum"]
IGNORE_INDEX = -100


def dense_mask(subtree_end: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Boolean ``[batch, 1, L, L]`` mask (True = may attend) from ``subtree_end`` ``[batch, L]``.

    O(L²) memory: the reference the sparse forms are tested against, and what ``eager`` attention adds to its own
    ``L × L`` scores. Padding (positions ``>= lengths``) sees only itself, so no row of the softmax is empty."""
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


def _row_ends(subtree_end: torch.Tensor, lengths: torch.Tensor | None) -> list[np.ndarray]:
    """Each row's ``subtree_end`` up to its length, as int64 numpy arrays (the structure every sparse form reads)."""
    ends = subtree_end.detach().cpu().numpy().astype(np.int64, copy=False)
    if lengths is None:
        return [e[: int(np.count_nonzero(e))] if e.size and e[-1] == 0 else e for e in ends]
    return [e[: int(n)] for e, n in zip(ends, lengths.tolist(), strict=True)]


def _root_keys(ends: np.ndarray, start: int, stop: int) -> np.ndarray:
    """The keys any query in ``[start, stop)`` may see: the ancestors of ``start`` and the block itself.

    A key ``k < start`` that a query ``q >= start`` sees has ``q < subtree_end[k]``, so ``start`` lies in its
    subtree too (subtrees are contiguous in depth-first order): the root path of the block's first token."""
    ancestors = np.flatnonzero(ends[:start] > start)
    return np.concatenate([ancestors, np.arange(start, stop, dtype=np.int64)])


def block_mask(subtree_end: torch.Tensor, block_size: int = 128, lengths: torch.Tensor | None = None) -> Any:
    """A FlexAttention ``BlockMask`` for rows ``[batch, L]`` built from ``subtree_end`` alone (no ``L × L`` pass).

    Per query block, the key blocks holding its root keys (:func:`_root_keys`) are listed; those whose every key
    is an ancestor of every query of the block are *full* (no ``mask_mod`` call), the rest *partial*, evaluated
    with ``k <= q < subtree_end[k]``. Padding keeps ``subtree_end == 0``, so padded keys are never seen (a padded
    query sees nothing; FlexAttention returns 0 for it). Building it is O(L² / block_size) index work and
    O((L / block_size)²) memory.

    Hugging Face models with ``attn_implementation="flex_attention"`` take it as ``attention_mask`` as is
    (:func:`tree_logprobs` builds it for them). FlexAttention has no backward on CPU (torch 2.13 raises); on CPU it
    serves scoring (logprobs), training through it needs a CUDA device, where transformers compiles the kernel.
    Collate with ``buckets=True`` so the compiled kernel sees a handful of lengths (docs/export.md)."""
    from torch.nn.attention.flex_attention import BlockMask

    batch, length = subtree_end.shape
    blocks = max(1, -(-length // block_size))
    partial = np.zeros((batch, blocks, blocks), dtype=np.int32)
    full = np.zeros((batch, blocks, blocks), dtype=np.int32)
    partial_n = np.zeros((batch, blocks), dtype=np.int32)
    full_n = np.zeros((batch, blocks), dtype=np.int32)
    padded = subtree_end.detach().cpu().numpy().astype(np.int64, copy=False)
    for b, ends in enumerate(_row_ends(subtree_end, lengths)):
        size = len(ends)
        # The smallest subtree end in each key block: a key block is full for a query block when it lies wholly
        # before it and every one of its keys' subtrees reaches past the block's last query.
        row = padded[b]
        tail = np.full(blocks * block_size - length, 0, dtype=np.int64)
        min_end = np.concatenate([row, tail]).reshape(blocks, block_size).min(axis=1)
        for qb in range(blocks):
            start, stop = qb * block_size, min((qb + 1) * block_size, length)
            if start >= size:
                continue  # padding only: it sees nothing
            kv = np.unique(_root_keys(ends, start, min(stop, size)) // block_size)
            last = stop - 1
            is_full = (kv < qb) & (min_end[kv] > last)
            f, p = kv[is_full], kv[~is_full]
            full[b, qb, : len(f)], full_n[b, qb] = f, len(f)
            partial[b, qb, : len(p)], partial_n[b, qb] = p, len(p)
    ends_t = subtree_end

    def tree(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        return (kv_idx <= q_idx) & (q_idx < ends_t[b, kv_idx])

    device = subtree_end.device

    def tensor(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a).to(device).unsqueeze(1)  # [B, H=1, ...]

    return BlockMask.from_kv_blocks(
        tensor(partial_n),
        tensor(partial),
        tensor(full_n),
        tensor(full),
        BLOCK_SIZE=block_size,
        mask_mod=tree,
        seq_lengths=(length, length),
    )


TILE_CACHE_BYTES = 64 << 20  # block masks kept per TreeMask across layers


class _Block(NamedTuple):
    """A block of queries ``[start, stop)`` and the keys it may see (:func:`_root_keys`) with their subtree ends."""

    start: int
    stop: int
    keys: torch.Tensor
    key_ends: torch.Tensor
    causal: bool  # the tile's mask is the causal square (no ancestors, no branch inside the block)


class TreeMask(torch.Tensor):
    """The tree attention mask of a batch, ``[B, 1, L, L]``, holding only ``subtree_end`` and ``lengths``.

    It stands where a 4D mask goes (Hugging Face models return a 4D ``attention_mask`` as is), and each attention
    kernel gets the form it can use:

    - ``scaled_dot_product_attention`` (``sdpa``) is intercepted and run block-sparse (:func:`tree_attention`):
      per block of ``block_size`` queries, one SDPA call over the block's root keys only, with a
      ``block × keys`` mask. Cost and memory follow the tree's root paths, not ``L²``; nothing ``L × L`` is built.
    - ``eager`` adds the mask to its own ``L × L`` scores: for that addition (and any other tensor operation) the
      dense form is built in that layer, in the dtype of the mask (``dtype=float`` gives the 0 / -inf form), and
      dropped after it; never in :func:`collate`.

    ``dtype`` is ``torch.bool`` (True = attend; SDPA) or a float dtype (additive; eager)."""

    subtree_end: torch.Tensor
    lengths: torch.Tensor | None
    block_size: int
    _plan: list[list[_Block]] | None
    _tiles: dict[tuple[int, int, torch.dtype], torch.Tensor]
    _tile_bytes: int

    @staticmethod
    def __new__(
        cls,
        subtree_end: torch.Tensor,
        lengths: torch.Tensor | None = None,
        block_size: int = 128,
        dtype: torch.dtype = torch.bool,
    ) -> TreeMask:
        batch, length = subtree_end.shape
        self = torch.Tensor._make_wrapper_subclass(
            cls, (batch, 1, length, length), dtype=dtype, device=subtree_end.device
        )
        self.subtree_end, self.lengths, self.block_size, self._plan = subtree_end, lengths, block_size, None
        self._tiles, self._tile_bytes = {}, 0
        return self

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        super().__init__()

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]
        return f"TreeMask(shape={tuple(self.shape)}, dtype={self.dtype}, block_size={self.block_size})"

    def dense(self) -> torch.Tensor:
        """The materialised mask in this mask's dtype (``L × L`` per row: eager's form, and the test reference)."""
        mask = dense_mask(self.subtree_end, self.lengths)
        return mask if self.dtype == torch.bool else additive_mask(mask, self.dtype)

    def plan(self) -> list[list[_Block]]:
        """Per row, its query blocks (cached: every layer and the backward reuse it)."""
        if self._plan is None:
            device = self.subtree_end.device
            plan = []
            for ends in _row_ends(self.subtree_end, self.lengths):
                blocks = []
                for start in range(0, len(ends), self.block_size):
                    stop = min(start + self.block_size, len(ends))
                    keys = _root_keys(ends, start, stop)
                    # A block at a root whose every token's subtree spans the rest of it is a causal square.
                    causal = keys[0] == start and int(ends[start:stop].min()) >= stop
                    gathered = torch.from_numpy(keys).to(device), torch.from_numpy(ends[keys]).to(device)
                    blocks.append(_Block(start, stop, *gathered, causal))
                plan.append(blocks)
            self._plan = plan
        return self._plan

    def block_tile(self, row: int, index: int, dtype: torch.dtype) -> torch.Tensor:
        """The additive mask (0 / -inf) of one query block over its keys, ``[1, 1, block, keys]`` in ``dtype``.

        Every layer uses the same tiles: they are kept while their total stays under ``TILE_CACHE_BYTES`` (a long
        deep row's tiles add up to ``L²/2`` values; past the budget they are built per call)."""
        cached = self._tiles.get((row, index, dtype))
        if cached is not None:
            return cached
        start, stop, keys, key_ends, _ = self.plan()[row][index]
        positions = torch.arange(start, stop, device=keys.device).unsqueeze(1)
        allowed = (keys.unsqueeze(0) <= positions) & (positions < key_ends.unsqueeze(0))
        tile = torch.zeros(allowed.shape, dtype=dtype, device=keys.device).masked_fill_(~allowed, float("-inf"))
        tile = tile[None, None]
        size = tile.numel() * tile.element_size()
        if self._tile_bytes + size <= TILE_CACHE_BYTES:
            self._tiles[(row, index, dtype)] = tile
            self._tile_bytes += size
        return tile

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            mask = kwargs.pop("attn_mask", None) if len(args) < 4 else args[3]
            query, key, value = args[:3]
            return tree_attention(query, key, value, mask, **{k: v for k, v in kwargs.items() if k != "attn_mask"})
        mask = args[0] if args else None
        if isinstance(mask, TreeMask):
            if func is torch.Tensor.__getitem__ and _whole(mask, args[1]):
                return mask  # ``mask[:, :, :, : key_len]`` with the whole key length
            if func in (torch.Tensor.detach, torch.Tensor.contiguous):
                return mask
            if func in (torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda) and not kwargs.get("dtype"):
                moved = func(mask.subtree_end, *args[1:], **kwargs)
                lengths = None if mask.lengths is None else mask.lengths.to(moved.device)
                return TreeMask(moved, lengths, mask.block_size, mask.dtype)
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)  # metadata (shape, dtype, device) as is; any other op goes to dispatch

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:  # type: ignore[override]
        # Any operation on the values (eager's ``scores + mask``, a slice, ...) sees the dense mask.
        def real(x: Any) -> Any:
            return x.dense() if isinstance(x, TreeMask) else x

        return func(*[real(a) for a in args], **{k: real(v) for k, v in (kwargs or {}).items()})


def _whole(mask: TreeMask, index: Any) -> bool:
    length = mask.shape[-1]
    parts = index if isinstance(index, tuple) else (index,)
    return all(
        p is Ellipsis
        or (
            isinstance(p, slice)
            and p.step in (None, 1)
            and (p.start or 0) == 0
            and (p.stop is None or p.stop >= length)
        )
        for p in parts
    )


def tree_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: TreeMask,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """``scaled_dot_product_attention(query, key, value, attn_mask=mask)`` computed block-sparse.

    Queries ``[B, H, L, D]`` go in blocks of ``mask.block_size``; each block attends over its root keys
    (:func:`_root_keys`: the first query's ancestors and the block), gathered once per block, with the exact mask
    ``k <= q < subtree_end[k]`` on that ``block × keys`` tile. A block at a root without a branch inside takes the
    kernel's causal path without a mask. Padded queries give 0 (nothing reads them: they are never a key)."""
    if is_causal:
        raise ValueError("tree attention takes its mask from subtree_end; is_causal must be False")
    batch, heads, length, _ = query.shape
    out_dim = value.shape[-1]
    rows = []
    for b, blocks in enumerate(mask.plan()):
        pieces = []
        for index, (start, stop, keys, _ends, causal) in enumerate(blocks):
            q = query[b : b + 1, :, start:stop]
            if causal:
                k, v = key[b : b + 1, :, start:stop], value[b : b + 1, :, start:stop]
                pieces.append(
                    F.scaled_dot_product_attention(
                        q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale, enable_gqa=enable_gqa
                    )
                )
                continue
            k, v = key[b : b + 1].index_select(2, keys), value[b : b + 1].index_select(2, keys)
            tile = mask.block_tile(b, index, query.dtype)  # additive: SDPA would convert a boolean one on every call
            pieces.append(
                F.scaled_dot_product_attention(
                    q, k, v, attn_mask=tile, dropout_p=dropout_p, scale=scale, enable_gqa=enable_gqa
                )
            )
        used = blocks[-1][1] if blocks else 0
        if used < length:
            pieces.append(query.new_zeros(1, heads, length - used, out_dim))
        rows.append(torch.cat(pieces, dim=2))
    return torch.cat(rows, dim=0) if rows else query.new_zeros(batch, heads, length, out_dim)


def bucket_length(length: int, multiple_of: int = 128) -> int:
    """The padded length for ``length``: the smallest of ``m, 2m, 3m, 4m, 6m, 8m, 12m, ...`` (``m`` =
    ``multiple_of``) that holds it. A run's rows then take two lengths per doubling (a compiled kernel is built
    once per length: 11 lengths from 128 to 4 096 tokens, 15 to 32 768), at most a third of a row padded past
    ``2m``."""
    size = multiple_of
    while size < length:
        if size >= 2 * multiple_of and size * 3 // 2 >= length:
            return size * 3 // 2
        size *= 2
    return size


def collate(
    rows: Sequence[dict[str, Any]], pad_id: int = 0, multiple_of: int = 1, buckets: bool = False
) -> dict[str, torch.Tensor]:
    """Pad tree rows (dicts as ``datasets`` yields them) into a batch.

    Returns ``input_ids``, ``position_ids``, ``parent_index``, ``subtree_end`` (0 on padding), ``loss_mask``,
    ``turn_index`` and ``lengths``: O(L) per row, no mask (a 32 k-token row collates in a few MB; the attention
    form is chosen at the forward, :func:`tree_attention_mask`). ``multiple_of`` rounds the padded length up;
    ``buckets`` rounds it to :func:`bucket_length` instead (for compiled FlexAttention). ``weights`` per token for
    every normalisation is left to :func:`loss_weights`."""
    lengths = [len(r["input_ids"]) for r in rows]
    length = max(lengths) if lengths else 0
    length = bucket_length(length, multiple_of) if buckets else -(-length // multiple_of) * multiple_of
    batch = len(rows)

    def pad(name: str, value: int, dtype: torch.dtype) -> torch.Tensor:
        out = torch.full((batch, length), value, dtype=dtype)
        for i, r in enumerate(rows):
            out[i, : lengths[i]] = torch.as_tensor(np.asarray(r[name]), dtype=dtype)
        return out

    return {
        "input_ids": pad("input_ids", pad_id, torch.long),
        "position_ids": pad("position_ids", 0, torch.long),
        "parent_index": pad("parent_index", -1, torch.long),
        "subtree_end": pad("subtree_end", 0, torch.long),
        "loss_mask": pad("loss_mask", 0, torch.long),
        "turn_index": pad("turn_index", -1, torch.long),
        "lengths": torch.tensor(lengths, dtype=torch.long),
    }


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, parent_index: torch.Tensor) -> torch.Tensor:
    """Log-probability of each token under the logits at its parent position, ``[B, L]`` (0 at roots).

    Computed in float32: ``log_softmax`` over each position's logits, then the entry ``[parent, token]`` per token
    (one pass over the ``L × vocab`` logits, as a flat sample's shifted gather; the logits are not copied per
    parent)."""
    batch, length, vocab = logits.shape
    safe_parent = parent_index.clamp(min=0)
    flat = torch.log_softmax(logits.float(), dim=-1).reshape(batch, length * vocab)
    lp = flat.gather(1, safe_parent * vocab + input_ids)
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
    """A dense 4D mask (:func:`dense_mask`) in the form ``model``'s attention takes.

    Hugging Face causal LMs (Qwen2/Qwen3 in transformers >= 4.53, checked on 5.x) return a 4D
    ``attention_mask`` from mask creation as is. ``sdpa`` passes it to ``scaled_dot_product_attention``, which
    takes a boolean mask (True = attend); ``eager`` *adds* the mask to the scores, so it needs the 0/-inf float
    form (a boolean mask would add 0/1 and attend everywhere)."""
    return additive_mask(mask, _float_dtype(model)) if _implementation(model) == "eager" else mask


def tree_attention_mask(model: Any, batch: dict[str, torch.Tensor], block_size: int = 128) -> Any:
    """The tree mask of a collated batch in the form ``model``'s attention implementation uses best:

    - ``flex_attention``: :func:`block_mask` (block-sparse kernel; the batch collated with ``multiple_of`` or
      ``buckets`` at ``block_size``);
    - ``sdpa`` (and an unset implementation): a boolean :class:`TreeMask`, run block-sparse through SDPA;
    - ``eager``: a :class:`TreeMask` in the model's float dtype (the additive form eager adds to its scores).

    Flash-attention kernels take no arbitrary mask: they are refused with the implementations that work."""
    implementation = _implementation(model)
    if implementation == "flex_attention":
        return block_mask(batch["subtree_end"], block_size, batch.get("lengths"))
    if implementation is not None and implementation.startswith(("flash_attention", "paged")):
        raise ValueError(
            f"tree rows need an attention mask, which {implementation!r} does not take; load the model with "
            'attn_implementation="sdpa", "flex_attention" or "eager"'
        )
    dtype = _float_dtype(model) if implementation == "eager" else torch.bool
    return TreeMask(batch["subtree_end"], batch.get("lengths"), block_size, dtype)


def _implementation(model: Any) -> str | None:
    return getattr(getattr(model, "config", None), "_attn_implementation", None)


def _float_dtype(model: Any) -> torch.dtype:
    try:
        return next(p.dtype for p in model.parameters() if p.is_floating_point())
    except (StopIteration, AttributeError):
        return torch.float32


def tree_logprobs(model: Any, batch: dict[str, torch.Tensor], attention_mask: Any = None) -> torch.Tensor:
    """Forward a collated batch; the log-probability of every token given its root path, ``[B, L]``.

    The mask is :func:`tree_attention_mask` for the model's attention implementation unless ``attention_mask`` is
    given (a dense mask from :func:`model_mask`, a :func:`block_mask` of another block size, ...)."""
    mask = attention_mask if attention_mask is not None else tree_attention_mask(model, batch)
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

    def __init__(self, pad_id: int = 0, multiple_of: int = 1, buckets: bool = False) -> None:
        self.pad_id, self.multiple_of, self.buckets = pad_id, multiple_of, buckets

    def __call__(self, features: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        return collate(features, self.pad_id, self.multiple_of, self.buckets)


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
