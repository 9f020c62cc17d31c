"""The sparse attention forms of tree rows (``msgtrain.trainers.tree``) against the dense ``L × L`` mask.

The oracle is :func:`dense_mask` (query ``q`` sees key ``k`` iff ``k <= q < subtree_end[k]``, built by brute force
over every pair) and torch's own SDPA on it: the block-sparse SDPA path, the eager path and the FlexAttention
``BlockMask`` must give what the dense mask gives, on seeded random prefix trees (several trees packed in one
row, branches inside a block, padding). ``test_export_tree.py`` checks the same forms against canonical rows of
real logs.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from msgtrain.trainers.tree import (  # noqa: E402
    TreeMask,
    block_mask,
    bucket_length,
    collate,
    dense_mask,
    tree_attention,
    tree_logprobs,
    weighted_nll,
)


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    """Tiny matrices: one thread is faster than contending for the cores (and spinning on a loaded machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def random_tree_row(rng: random.Random, trees: int, max_segments: int, max_segment: int) -> dict[str, Any]:
    """A row of ``trees`` random prefix trees serialised depth-first, with the tree-row fields.

    Segments of 1..``max_segment`` tokens; each new segment hangs under a random earlier one (or starts a tree),
    so rows have deep paths, wide fans and branches at any offset."""
    row: dict[str, Any] = {k: [] for k in ("input_ids", "position_ids", "parent_index", "subtree_end")}
    row["loss_mask"], row["turn_index"] = [], []
    for _ in range(trees):
        sizes = [rng.randint(1, max_segment) for _ in range(rng.randint(1, max_segments))]
        children: list[list[int]] = [[] for _ in sizes]
        for s in range(1, len(sizes)):
            children[rng.randrange(s)].append(s)
        _emit(row, rng, sizes, children, 0, -1, 0)
    row["turn_ids"], row["turn_sample_ids"] = ["t"], ["s"]
    return row


def _emit(
    row: dict[str, Any],
    rng: random.Random,
    sizes: list[int],
    kids: list[list[int]],
    s: int,
    parent: int,
    depth: int,
) -> None:
    """Write segment ``s`` and then its children's subtrees; every token's ``subtree_end`` is where they end."""
    start = len(row["input_ids"])
    for i in range(sizes[s]):
        row["input_ids"].append(rng.randrange(64))
        row["position_ids"].append(depth + i)
        row["parent_index"].append(parent if i == 0 else start + i - 1)
        row["subtree_end"].append(-1)
        trained = rng.random() < 0.6
        row["loss_mask"].append(int(trained))
        row["turn_index"].append(0 if trained else -1)
    for c in kids[s]:
        _emit(row, rng, sizes, kids, c, start + sizes[s] - 1, depth + sizes[s])
    row["subtree_end"][start : start + sizes[s]] = [len(row["input_ids"])] * sizes[s]


def _qkv(batch: int, heads: int, length: int, dim: int, seed: int) -> list[Any]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, heads, length, dim, generator=g, requires_grad=True) for _ in range(3)]


@pytest.mark.parametrize("seed", range(8))
def test_block_sparse_sdpa_equals_sdpa_over_the_dense_mask_forward_and_backward(seed: int) -> None:
    rng = random.Random(seed)
    rows = [random_tree_row(rng, rng.randint(1, 3), 12, 9) for _ in range(rng.randint(1, 3))]
    batch = collate(rows)
    length = batch["input_ids"].shape[1]
    block = rng.choice([3, 7, 16, 64])  # blocks smaller and larger than segments: branches inside a block
    real = torch.arange(length)[None, :] < batch["lengths"][:, None]  # padded queries are nobody's key
    for dtype in (torch.bool, torch.float32):  # SDPA's boolean form and eager's additive form
        q, k, v = _qkv(len(rows), 2, length, 8, seed)
        dense = dense_mask(batch["subtree_end"], batch["lengths"])
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense)
        (ref * real[:, None, :, None]).square().sum().backward()
        ref_grads = [t.grad.clone() for t in (q, k, v)]
        for t in (q, k, v):
            t.grad = None
        mask = TreeMask(batch["subtree_end"], batch["lengths"], block, dtype)
        got = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # dispatched to the tree
        (got * real[:, None, :, None]).square().sum().backward()
        torch.testing.assert_close(got * real[:, None, :, None], ref * real[:, None, :, None], rtol=1e-5, atol=1e-6)
        for t, expected in zip((q, k, v), ref_grads, strict=True):
            torch.testing.assert_close(t.grad, expected, rtol=1e-5, atol=1e-5)
        padded = got.transpose(1, 2)[~real]
        assert torch.equal(padded, torch.zeros_like(padded))


def test_a_tree_mask_is_the_dense_mask_wherever_it_is_used_as_a_tensor() -> None:
    rows = [random_tree_row(random.Random(5), 2, 6, 5), random_tree_row(random.Random(6), 1, 4, 3)]
    batch = collate(rows)
    dense = dense_mask(batch["subtree_end"], batch["lengths"])
    mask = TreeMask(batch["subtree_end"], batch["lengths"], 4)
    assert mask.shape == dense.shape and mask.dtype == torch.bool and mask.dim() == 4
    assert mask[:, :, :, : mask.shape[-1]] is mask and mask.detach() is mask  # what the models do to a 4D mask
    assert torch.equal(mask & torch.ones_like(dense), dense)  # any other operation sees the dense values
    scores = torch.randn(dense.shape)
    additive = TreeMask(batch["subtree_end"], batch["lengths"], 4, torch.float32)
    expected = scores.masked_fill(~dense, torch.finfo(torch.float32).min)
    assert torch.equal(scores + additive, scores + torch.where(dense, 0.0, torch.finfo(torch.float32).min))
    assert torch.equal(torch.softmax(scores + additive, -1), torch.softmax(expected, -1))


@pytest.mark.parametrize("seed", range(10))
def test_the_flex_block_mask_lists_every_tile_the_dense_mask_needs_and_marks_full_tiles_exactly(seed: int) -> None:
    """Built from ``subtree_end`` alone, checked tile by tile against the dense mask: a tile with an allowed pair
    is listed (full or partial), a full tile is all allowed, and the ``mask_mod`` is the dense rule."""
    rng = random.Random(seed)
    rows = [random_tree_row(rng, rng.randint(1, 3), 14, 12) for _ in range(rng.randint(1, 3))]
    size = rng.choice([16, 32])
    batch = collate(rows, multiple_of=size)
    mask = block_mask(batch["subtree_end"], size, batch["lengths"])
    dense = dense_mask(batch["subtree_end"])[:, 0]  # padding: sees nothing (FlexAttention gives 0 there)
    length = dense.shape[-1]
    blocks = length // size
    tiles = dense.view(len(rows), blocks, size, blocks, size).permute(0, 1, 3, 2, 4)
    for b in range(len(rows)):
        for qb in range(blocks):
            partial = set(mask.kv_indices[b, 0, qb, : mask.kv_num_blocks[b, 0, qb]].tolist())
            full = set(mask.full_kv_indices[b, 0, qb, : mask.full_kv_num_blocks[b, 0, qb]].tolist())
            assert not partial & full
            for kb in range(blocks):
                tile = tiles[b, qb, kb]
                if kb in full:
                    assert bool(tile.all())
                elif tile.any():
                    assert kb in partial
    q_idx, kv_idx = torch.meshgrid(torch.arange(length), torch.arange(length), indexing="ij")
    for b in range(len(rows)):
        assert torch.equal(mask.mask_mod(torch.tensor(b), torch.tensor(0), q_idx, kv_idx), dense[b])


def _tiny_qwen3(attention: str) -> Any:
    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=1024,
    )
    config._attn_implementation = attention
    return transformers.Qwen3ForCausalLM(config).float()


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_the_model_gives_the_same_loss_and_gradient_through_the_tree_mask_as_through_the_dense_mask(
    attention: str,
) -> None:
    """End to end through a Hugging Face Qwen3 (its mask creation returns a 4D mask as is): the sparse form the
    model gets by default against the dense mask in the model's form, on random rows with padding."""
    from msgtrain.trainers.tree import model_mask

    rng = random.Random(17)
    rows = [random_tree_row(rng, 2, 10, 12), random_tree_row(rng, 1, 8, 10)]
    batch = collate(rows)
    model = _tiny_qwen3(attention)

    def loss_and_grads(mask: Any) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad()
        lp = tree_logprobs(model, batch, mask)
        loss = weighted_nll(lp, batch["loss_mask"], torch.ones(lp.shape))
        loss.backward()
        return loss.detach(), lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    ref_loss, ref_lp, ref_grads = loss_and_grads(model_mask(model, dense_mask(batch["subtree_end"], batch["lengths"])))
    loss, lp, grads = loss_and_grads(None)  # the default form: a TreeMask for this implementation
    trained = batch["loss_mask"].bool()
    assert abs(loss.item() - ref_loss.item()) <= 1e-6 * abs(ref_loss.item())
    torch.testing.assert_close(lp[trained], ref_lp[trained], rtol=0, atol=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_flash_attention_models_are_refused_with_the_implementations_that_take_a_tree_mask() -> None:
    from msgtrain.trainers.tree import tree_attention_mask

    model = _tiny_qwen3("sdpa")
    model.config._attn_implementation = "flash_attention_2"
    batch = collate([random_tree_row(random.Random(1), 1, 3, 3)])
    with pytest.raises(ValueError, match="sdpa"):
        tree_attention_mask(model, batch)


def test_bucketed_lengths_take_two_sizes_per_doubling_and_hold_the_row() -> None:
    sizes = {bucket_length(n, 128) for n in range(1, 4097)}
    assert sorted(sizes) == [128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096]
    assert all(bucket_length(n, 128) >= n for n in range(1, 40000, 97))
    assert all(bucket_length(n, 128) <= max(128, 1.5 * n) for n in range(257, 40000, 97))  # past 2m
    rows = [random_tree_row(random.Random(3), 3, 20, 20)]
    assert collate(rows, multiple_of=128, buckets=True)["input_ids"].shape[1] == bucket_length(
        len(rows[0]["input_ids"]), 128
    )


def _peak_rise(call: Any) -> int:
    """Bytes the resident high-water mark rises above the resident size while ``call()`` runs (Linux)."""
    status, clear = Path("/proc/self/status"), Path("/proc/self/clear_refs")
    try:
        clear.write_text("5")  # resets VmHWM to the current resident size
    except OSError:
        pytest.skip("/proc/self/clear_refs is not writable here")

    def field(name: str) -> int:
        return int(next(x for x in status.read_text().splitlines() if x.startswith(name + ":")).split()[1]) * 1024

    before = field("VmRSS")
    kept = call()
    rise = field("VmHWM") - before
    del kept
    return rise


def test_collating_a_32k_token_row_stays_under_64_mb_where_a_dense_mask_of_12k_does_not() -> None:
    rng = random.Random(0)
    row: dict[str, Any] = {"input_ids": []}
    while len(row["input_ids"]) < 32768:  # many packed trees up to 32 k tokens
        more = random_tree_row(rng, 1, 40, 200)
        if len(row["input_ids"]) + len(more["input_ids"]) > 32768:
            break
        shift = len(row["input_ids"])
        more["parent_index"] = [p + shift if p >= 0 else -1 for p in more["parent_index"]]
        more["subtree_end"] = [e + shift for e in more["subtree_end"]]
        for k, v in more.items():
            row.setdefault(k, [])
            if k not in ("turn_ids", "turn_sample_ids"):
                row[k] = row[k] + v
    assert len(row["input_ids"]) > 30000
    assert _peak_rise(lambda: collate([row])) <= 64 * 2**20
    # The measure sees an L × L mask: a dense mask of 12 k tokens (144 MiB of booleans, well clear of the bound; one
    # of 8 k is exactly 64 MiB, which the measure sees a few pages short of) is caught.
    small = collate([{k: v[:12288] if isinstance(v, list) else v for k, v in row.items()}])
    ends = small["subtree_end"].clamp(max=12288)
    assert _peak_rise(lambda: dense_mask(ends, small["lengths"])) > 64 * 2**20


def test_tree_attention_refuses_a_causal_flag() -> None:
    batch = collate([random_tree_row(random.Random(2), 1, 3, 3)])
    q, k, v = _qkv(1, 1, batch["input_ids"].shape[1], 4, 0)
    with pytest.raises(ValueError, match="is_causal"):
        tree_attention(q, k, v, TreeMask(batch["subtree_end"], batch["lengths"]), is_causal=True)
